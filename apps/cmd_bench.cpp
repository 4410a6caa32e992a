// mtb bench -m MODEL [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [-r REPS] [--machine] [--json]
// Prompt and generation speed as medians, with achieved GB/s and GFLOP/s and, with
// --machine, those as fractions of the read bandwidth and FMA peak measured in the same run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/core/parallel.h"
#include "mtb/io/model_file.h"
#include "mtb/kernels/probe.h"
#include "mtb/tools/bench.h"
#include "mtb/tools/report.h"

namespace mtb::app {

void add_bench(CLI::App& app) {
  struct Opts {
    std::string model, cache_type = "f32", mla = "auto";
    BenchOptions b;
    int threads = 0;
    bool json = false, machine = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("bench", "Prompt and generation speed (medians), GB/s, GFLOP/s, peak RSS");
  sub->add_option("-m,--model", o->model, "Model path (omit with --machine to measure only the machine)");
  sub->add_option("-p,--prompt", o->b.prompt_tokens, "Prompt tokens (0: skip)")->capture_default_str();
  sub->add_option("-n,--gen", o->b.gen_tokens, "Generated tokens (0: skip)")->capture_default_str();
  sub->add_option("-d,--depth", o->b.depth, "Tokens in the KV cache before generating")->capture_default_str();
  sub->add_option("-r,--reps", o->b.reps, "Repetitions")->capture_default_str();
  sub->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  sub->add_option("--cache-type", o->cache_type, "KV cache element type")->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
  sub->add_option("--mla", o->mla, "MLA form: auto, plain, absorbed")->check(CLI::IsMember({"auto", "plain", "absorbed"}))->capture_default_str();
  sub->add_flag("--machine", o->machine, "Also measure the machine's read bandwidth and FMA peak");
  sub->add_flag("--json", o->json, "Print JSON");
  sub->callback([o] {
    if (o->threads < 0) throw Error("-t must be positive");
    if (o->threads > 0) set_num_threads(o->threads);
    if (o->model.empty() && !o->machine) throw Error("bench: give -m MODEL, --machine, or both");
    nlohmann::json j = {{"threads", num_threads()}};
    // The model runs first, so that peak RSS is the model's, not the bandwidth probe's buffer.
    std::unique_ptr<Model> model;
    BenchResult r;
    int64_t rss = 0;
    if (!o->model.empty()) {
      const DType ct = o->cache_type == "bf16" ? DType::BF16 : o->cache_type == "f16" ? DType::F16 : DType::F32;
      o->b.cache_type = ct;
      o->b.mla = o->mla == "plain" ? MlaForm::Plain : o->mla == "absorbed" ? MlaForm::Absorbed : MlaForm::Auto;
      model = std::make_unique<Model>(open_model(o->model));
      r = run_bench(*model, o->b);
      rss = peak_rss_bytes();
    }
    double read_gbs = 0, fma = 0;
    if (o->machine) {
      read_gbs = kernels::measure_read_gb_per_s();
      fma = kernels::measure_fma_gflops();
      j["read_gb_per_s"] = read_gbs, j["fma_gflops"] = fma;
      if (!o->json) std::printf("machine: %d threads, read %.1f GB/s, FMA peak %.1f GFLOP/s\n", num_threads(), read_gbs, fma);
    }
    if (!o->model.empty()) {
      const DType ct = o->b.cache_type;
      const TokenCost cost = token_cost(*model, int(dtype_size(ct)));
      const double pp = BenchResult::median(r.pp_tokens_per_s), tg = BenchResult::median(r.tg_tokens_per_s);
      // Prefill: useful FLOPs per token averaged over the prompt (the LM head runs for the
      // last token only, so it counts once); decode: bytes per token at the mean depth.
      const int64_t P = o->b.prompt_tokens;
      const double pp_flops = P > 0 ? 2.0 * double(cost.weight_params - cost.lm_head_params) +
                                          2.0 * double(cost.lm_head_params) / double(P) + cost.attention_flops((P - 1) / 2)
                                    : 0;
      const double mean_depth = o->b.depth + (o->b.gen_tokens - 1) / 2.0;
      const double tg_bytes = double(cost.weight_bytes) + double(cost.kv_bytes_per_position) * (mean_depth + 1);
      const double pp_gflops = pp * pp_flops / 1e9, tg_gbs = tg * tg_bytes / 1e9;
      auto spread = [](const std::vector<double>& v) {
        return v.empty() ? 0.0 : (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / 2;
      };
      j.update({{"model", o->model}, {"prompt_tokens", P}, {"gen_tokens", o->b.gen_tokens}, {"depth", o->b.depth},
                {"reps", o->b.reps}, {"pp_tokens_per_s", pp}, {"tg_tokens_per_s", tg}, {"pp_runs", r.pp_tokens_per_s},
                {"tg_runs", r.tg_tokens_per_s}, {"pp_gflops", pp_gflops}, {"tg_gb_per_s", tg_gbs},
                {"weight_bytes", cost.weight_bytes}, {"tg_bytes_per_token", tg_bytes}, {"pp_flops_per_token", pp_flops},
                {"kv_cache_bytes", r.kv_cache_bytes}, {"peak_rss_bytes", rss}, {"mla", o->mla},
                {"cache_type", o->cache_type}});
      if (o->machine) {
        j["pp_fraction_of_fma_peak"] = pp_gflops / fma;
        j["tg_fraction_of_bandwidth"] = tg_gbs / read_gbs;
        j["tg_roofline_tokens_per_s"] = read_gbs * 1e9 / tg_bytes;
      }
      if (!o->json) {
        std::printf("model %s: weights %s read per token, KV cache %s (%s), %d threads\n", o->model.c_str(),
                    human_bytes(double(cost.weight_bytes)).c_str(), human_bytes(double(r.kv_cache_bytes)).c_str(),
                    o->cache_type.c_str(), num_threads());
        std::printf("%-10s %12s %10s %12s %s\n", "test", "tok/s", "+-", "achieved", o->machine ? "of machine limit" : "");
        if (P > 0) {
          std::printf("%-10s %12.2f %10.2f %7.1f GFLOP/s", ("pp" + std::to_string(P)).c_str(), pp, spread(r.pp_tokens_per_s), pp_gflops);
          if (o->machine) std::printf("  %5.1f%% of FMA peak", 100 * pp_gflops / fma);
          std::printf("\n");
        }
        if (o->b.gen_tokens > 0) {
          const std::string name = "tg" + std::to_string(o->b.gen_tokens) + (o->b.depth ? "@d" + std::to_string(o->b.depth) : "");
          std::printf("%-10s %12.2f %10.2f %8.1f GB/s", name.c_str(), tg, spread(r.tg_tokens_per_s), tg_gbs);
          if (o->machine) std::printf("  %5.1f%% of bandwidth (roofline %.1f tok/s)", 100 * tg_gbs / read_gbs, read_gbs * 1e9 / tg_bytes);
          std::printf("\n");
        }
        std::printf("peak RSS %s (medians of %d runs)\n", human_bytes(double(rss)).c_str(), o->b.reps);
      }
    }
    if (o->json) std::cout << j.dump(2) << "\n";
  });
}

}  // namespace mtb::app
