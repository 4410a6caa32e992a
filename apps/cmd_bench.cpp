// mtb bench -m MODEL [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [-r REPS] [--json]
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/core/parallel.h"
#include "mtb/io/model_file.h"
#include "mtb/tools/bench.h"
#include "mtb/tools/report.h"

namespace mtb::app {

void add_bench(CLI::App& app) {
  struct Opts {
    std::string model, cache_type = "f32", mla = "auto";
    BenchOptions b;
    int threads = 0;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("bench", "Prompt and generation speed (medians over repetitions)");
  sub->add_option("-m,--model", o->model, "Model path")->required();
  sub->add_option("-p,--prompt", o->b.prompt_tokens, "Prompt tokens (0: skip)")->capture_default_str();
  sub->add_option("-n,--gen", o->b.gen_tokens, "Generated tokens (0: skip)")->capture_default_str();
  sub->add_option("-d,--depth", o->b.depth, "Tokens in the KV cache before generating")->capture_default_str();
  sub->add_option("-r,--reps", o->b.reps, "Repetitions")->capture_default_str();
  sub->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  sub->add_option("--cache-type", o->cache_type, "KV cache element type")->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
  sub->add_option("--mla", o->mla, "MLA form: auto, plain, absorbed")->check(CLI::IsMember({"auto", "plain", "absorbed"}))->capture_default_str();
  sub->add_flag("--json", o->json, "Print JSON");
  sub->callback([o] {
    if (o->threads < 0) throw Error("-t must be positive");
    if (o->threads > 0) set_num_threads(o->threads);
    o->b.cache_type = o->cache_type == "bf16" ? DType::BF16 : o->cache_type == "f16" ? DType::F16 : DType::F32;
    o->b.mla = o->mla == "plain" ? MlaForm::Plain : o->mla == "absorbed" ? MlaForm::Absorbed : MlaForm::Auto;
    Model model = open_model(o->model);
    const BenchResult r = run_bench(model, o->b);
    auto spread = [](const std::vector<double>& v) {
      if (v.empty()) return 0.0;
      return (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / 2;
    };
    const double pp = BenchResult::median(r.pp_tokens_per_s), tg = BenchResult::median(r.tg_tokens_per_s);
    if (o->json) {
      nlohmann::json j = {{"model", o->model}, {"threads", num_threads()}, {"prompt_tokens", o->b.prompt_tokens},
                          {"gen_tokens", o->b.gen_tokens}, {"depth", o->b.depth}, {"reps", o->b.reps},
                          {"pp_tokens_per_s", pp}, {"tg_tokens_per_s", tg}, {"pp_runs", r.pp_tokens_per_s},
                          {"tg_runs", r.tg_tokens_per_s}, {"kv_cache_bytes", r.kv_cache_bytes}, {"mla", o->mla},
                          {"cache_type", o->cache_type}};
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::printf("model %s, %d threads, cache %s (%s)\n", o->model.c_str(), num_threads(), o->cache_type.c_str(),
                human_bytes(double(r.kv_cache_bytes)).c_str());
    if (o->b.prompt_tokens > 0)
      std::printf("pp%-5d %10.2f tok/s  +- %.2f  (median of %d)\n", o->b.prompt_tokens, pp, spread(r.pp_tokens_per_s), o->b.reps);
    if (o->b.gen_tokens > 0)
      std::printf("tg%-5d %10.2f tok/s  +- %.2f  (median of %d, depth %d)\n", o->b.gen_tokens, tg, spread(r.tg_tokens_per_s),
                  o->b.reps, o->b.depth);
  });
}

}  // namespace mtb::app
