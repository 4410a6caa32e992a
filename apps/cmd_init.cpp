// mtb init (--preset NAME | --config FILE) [--seed N] [--dtype f32|bf16] -o DIR
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/hf.h"
#include "mtb/tools/init.h"
#include "mtb/tools/report.h"

namespace mtb::app {

void add_init(CLI::App& app) {
  struct Opts {
    std::string preset, config, out, dtype = "f32";
    uint64_t seed = 0;
    double shard_mib = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("init", "Write a randomly initialized model as a Hugging Face directory");
  sub->add_option("--preset", o->preset, "A named preset (mtb info --list)");
  sub->add_option("--config", o->config, "A Hugging Face config.json");
  sub->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "Weight type")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  sub->add_option("--shard-size", o->shard_mib, "Split the weights into shards of at most this many MiB");
  sub->add_option("-o,--output", o->out, "Output directory")->required();
  sub->callback([o] {
    ModelConfig c = config_from_options(o->preset, o->config);
    const DType dtype = o->dtype == "bf16" ? DType::BF16 : DType::F32;
    const auto t0 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "init: %s parameters, %s %s ...\n", with_commas(count_params(c).total()).c_str(),
                 o->dtype.c_str(), human_bytes(double(count_params(c).total()) * double(dtype_size(dtype))).c_str());
    TensorMap w = init_weights(c, o->seed, dtype);
    std::fprintf(stderr, "init: writing %s ...\n", o->out.c_str());
    save_hf_dir(o->out, c, w, dtype, size_t(o->shard_mib * 1048576.0));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s (%s, seed %llu) in %.1f s\n", o->out.c_str(), c.family.c_str(),
                (unsigned long long)o->seed, s);
  });
}

}  // namespace mtb::app
