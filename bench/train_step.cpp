// mtb's side of bench/train_step.sh: one training step (forward, backward, clipping,
// AdamW) of a preset at batch B x T tokens, timed; prints one JSON line.
//   build/mtb_bench_train [--preset example-3m] [--batch 8] [--seq 256] [--steps 5] [--warmup 1]
// MTB_THREADS sets the thread count (the script uses 2, as PyTorch's side).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "mtb/core/error.h"
#include "mtb/core/parallel.h"
#include "mtb/kernels/cpu.h"
#include "mtb/model/config.h"
#include "mtb/tools/init.h"
#include "mtb/train/forward_backward.h"
#include "mtb/train/optim.h"
#include "mtb/train/trainable.h"

using namespace mtb;

int main(int argc, char** argv) {
  std::string preset_name = "example-3m";
  int B = 8, T = 256, steps = 5, warmup = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--preset") preset_name = argv[i + 1];
    else if (k == "--batch") B = std::atoi(argv[i + 1]);
    else if (k == "--seq") T = std::atoi(argv[i + 1]);
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--warmup") warmup = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    const ModelConfig c = preset(preset_name);
    train::Trainable model = train::Trainable::from_tensors(c, init_weights(c, 1, DType::F32), "init");
    train::AdamW opt(model, {});
    std::mt19937 rng(7);
    std::vector<int32_t> seq(size_t(B) * (T + 1));
    for (auto& t : seq) t = int32_t(rng() % uint32_t(c.vocab));
    std::vector<int32_t> ids(size_t(B) * T), targets(size_t(B) * T);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        ids[size_t(b) * T + t] = seq[size_t(b) * (T + 1) + t];
        targets[size_t(b) * T + t] = seq[size_t(b) * (T + 1) + t + 1];
      }
    train::Activations acts;
    std::vector<double> times, fwd_times;
    double first_loss = 0, last_loss = 0;
    using clock = std::chrono::steady_clock;
    auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    };
    std::vector<double> cpu_times;
    for (int s = 0; s < warmup + steps; ++s) {
      const auto t0 = clock::now();
      const double c0 = cpu_now();
      model.zero_grads();
      const double loss = train::forward_backward_mean(model, ids.data(), targets.data(), B, T, acts);
      train::clip_grad_norm(model, 1.0);
      opt.step(model, 1e-3);
      const double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (s == 0) first_loss = loss;
      last_loss = loss;
      if (s >= warmup) times.push_back(dt), cpu_times.push_back(cpu_now() - c0);
      const auto f0 = clock::now();
      train::evaluate(model, ids.data(), targets.data(), B, T, acts);
      if (s >= warmup) fwd_times.push_back(std::chrono::duration<double>(clock::now() - f0).count());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    const double med = median(times), flops = train::train_step_flops(c, B, T);
    std::string all;
    for (double t : times) all += (all.empty() ? "" : ", ") + std::to_string(t);
    std::printf("{\"impl\": \"mtb\", \"preset\": \"%s\", \"batch\": %d, \"seq\": %d, \"threads\": %d, \"avx2\": %s, "
                "\"step_s_median\": %.6f, \"step_s_all\": [%s], \"cpu_s_per_step_median\": %.6f, \"forward_s_median\": %.6f, \"tokens_per_s\": %.1f, "
                "\"gflops\": %.2f, \"step_gflop\": %.3f, \"loss_first\": %.6f, \"loss_last\": %.6f}\n",
                preset_name.c_str(), B, T, num_threads(), kernels::use_avx2() ? "true" : "false", med, all.c_str(), median(cpu_times),
                median(fwd_times), double(B) * T / med, flops / med / 1e9, flops / 1e9, first_loss, last_loss);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
