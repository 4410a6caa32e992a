// mtb bench -m MODEL [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [-r REPS] [--machine] [--json]
// mtb bench -m MODEL --parallel 1,2,4,8,16 [-p 128] [-n 128] [--shared-prefix S] [--batch-tokens N]
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
#include "mtb/tools/batch_bench.h"
#include "mtb/tools/bench.h"
#include "mtb/tools/kv_planner.h"
#include "mtb/tools/report.h"

namespace mtb::app {

namespace {

struct BatchedArgs {
  std::string model, cache_type, mla;
  BenchOptions b;
  bool json = false, machine = false;
  std::vector<int> parallel;
  int shared_prefix = 0, batch_tokens = 0;
  std::string kv_budget;
};

// mtb bench --parallel: the batching engine at each parallelism (see tools/batch_bench.h).
void batched(const BatchedArgs& a) {
  if (a.model.empty()) throw Error("bench --parallel needs -m MODEL");
  BatchBenchOptions bo;
  bo.parallel = a.parallel, bo.prompt_tokens = a.b.prompt_tokens, bo.gen_tokens = a.b.gen_tokens;
  bo.reps = a.b.reps, bo.shared_prefix = a.shared_prefix, bo.batch_tokens = a.batch_tokens;
  bo.cache_type = a.cache_type == "bf16" ? DType::BF16 : a.cache_type == "f16" ? DType::F16 : DType::F32;
  bo.mla = a.mla == "plain" ? MlaForm::Plain : a.mla == "absorbed" ? MlaForm::Absorbed : MlaForm::Auto;
  bo.validate();
  if (a.b.depth != 0) throw Error("bench: -d does not apply with --parallel");
  Model model = open_model(a.model);
  if (!a.kv_budget.empty()) bo.kv_tokens = parse_kv_budget(a.kv_budget, model.config(), bo.cache_type);
  const TokenCost cost = token_cost(model, int(dtype_size(bo.cache_type)));
  // Useful FLOPs of a decoded token: every weight once (the LM head included) and attention
  // at the mean depth of the decode phase.
  const double depth = bo.shared_prefix + bo.prompt_tokens + (bo.gen_tokens - 1) / 2.0;
  const double tg_flops = 2.0 * double(cost.weight_params) + cost.attention_flops(int64_t(depth));
  if (!a.json)
    std::printf("model %s, %d threads, -p %d -n %d%s, medians of %d\n%6s %8s %8s %10s %10s %10s %10s %10s %12s\n",
                a.model.c_str(), num_threads(), bo.prompt_tokens, bo.gen_tokens,
                bo.shared_prefix ? (" --shared-prefix " + std::to_string(bo.shared_prefix)).c_str() : "", bo.reps,
                "B", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "t/s/seq", "prefilled", "reused", "KV peak");
  nlohmann::json list = nlohmann::json::array();
  const auto rows = run_batched_bench(model, bo, [&](const BatchBenchRow& r) {
    const double pp = BenchResult::median(r.pp_tokens_per_s), tg = BenchResult::median(r.tg_tokens_per_s);
    if (!a.json)
      std::printf("%6d %8.3f %8.1f %10.3f %10.2f %10.2f %10lld %10lld %12s\n", r.parallel, r.pp_seconds, pp, r.tg_seconds,
                  tg, tg / r.parallel, (long long)r.prefilled_tokens, (long long)r.reused_tokens,
                  human_bytes(double(r.peak_kv_bytes)).c_str());
    std::fflush(stdout);
    list.push_back({{"parallel", r.parallel}, {"pp_tokens_per_s", pp}, {"tg_tokens_per_s", tg},
                    {"tg_per_sequence_tokens_per_s", tg / r.parallel}, {"pp_seconds", r.pp_seconds},
                    {"tg_seconds", r.tg_seconds}, {"pp_runs", r.pp_tokens_per_s}, {"tg_runs", r.tg_tokens_per_s},
                    {"prompt_tokens", bo.prompt_tokens}, {"gen_tokens", bo.gen_tokens},
                    {"shared_prefix", bo.shared_prefix}, {"prefilled_tokens", r.prefilled_tokens},
                    {"reused_tokens", r.reused_tokens}, {"kv_blocks_peak", r.peak_blocks},
                    {"kv_blocks_total", r.total_blocks}, {"kv_block_size", r.block_size},
                    {"kv_bytes_peak", r.peak_kv_bytes}, {"kv_pool_bytes", r.pool_bytes},
                    {"tg_gflops", tg * tg_flops / 1e9}});
  });
  (void)rows;
  const int64_t rss = peak_rss_bytes();
  if (a.machine) {
    const double fma = kernels::measure_fma_gflops();
    for (auto& j : list) j["tg_fraction_of_fma_peak"] = j["tg_gflops"].get<double>() / fma, j["fma_gflops"] = fma;
    if (!a.json) {
      std::printf("FMA peak %.1f GFLOP/s; decode in useful FLOPs (%.2f GFLOP/token):", fma, tg_flops / 1e9);
      for (const auto& j : list)
        std::printf(" B=%d %.1f%%", j["parallel"].get<int>(), 100 * j["tg_fraction_of_fma_peak"].get<double>());
      std::printf("\n");
    }
  }
  for (auto& j : list) j["peak_rss_bytes"] = rss, j["threads"] = num_threads(), j["model"] = a.model;
  if (a.json) std::cout << list.dump(2) << "\n";
  else std::printf("peak RSS %s\n", human_bytes(double(rss)).c_str());
}

}  // namespace

void add_bench(CLI::App& app) {
  struct Opts {
    std::string model, cache_type = "f32", mla = "auto";
    BenchOptions b;
    int threads = 0;
    bool json = false, machine = false;
    std::vector<int> parallel;
    int shared_prefix = 0, batch_tokens = 0;
    std::string kv_budget;
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
  sub->add_option("--parallel", o->parallel, "Batched: counts of sequences at once, e.g. 1,2,4,8,16 (as llama-batched-bench -npl)")
      ->delimiter(',');
  sub->add_option("--shared-prefix", o->shared_prefix, "Batched: tokens every prompt begins with (prefilled once, then reused)");
  sub->add_option("--batch-tokens", o->batch_tokens, "Batched: tokens per step (default: every prompt in one step)");
  sub->add_option("--kv-budget", o->kv_budget, "Batched: the KV pool, e.g. 2GiB or '4096 tokens' (default: room for all)");
  sub->add_flag("--machine", o->machine, "Also measure the machine's read bandwidth and FMA peak");
  sub->add_flag("--json", o->json, "Print JSON");
  sub->callback([o] {
    if (o->threads < 0) throw Error("-t must be positive");
    if (o->threads > 0) set_num_threads(o->threads);
    if (o->model.empty() && !o->machine) throw Error("bench: give -m MODEL, --machine, or both");
    if (!o->parallel.empty()) {
      BatchedArgs a;
      a.model = o->model, a.cache_type = o->cache_type, a.mla = o->mla, a.b = o->b;
      a.json = o->json, a.machine = o->machine, a.parallel = o->parallel;
      a.shared_prefix = o->shared_prefix, a.batch_tokens = o->batch_tokens, a.kv_budget = o->kv_budget;
      return batched(a);
    }
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
