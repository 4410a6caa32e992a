#include "mtb/kernels/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/cpu.h"
#include "mtb/kernels/matmul_grad.h"

namespace mtb::kernels {

double read_gb_per_s_avx2(const float* data, size_t n, int reps, int prefetch, int far);
double fma_gflops_avx2(int reps);
double fma_gflops_avx512(int reps);

double measure_read_gb_per_s(size_t bytes, int reps) {
  const size_t n = bytes / 4 & ~size_t(31);
  std::unique_ptr<float, decltype(&std::free)> buf(static_cast<float*>(std::aligned_alloc(64, n * 4)), &std::free);
  float* data = buf.get();
  parallel_for(int64_t(n), [&](int64_t b, int64_t e, int) {  // touch every page, from the thread that reads it
    for (int64_t i = b; i < e; ++i) data[i] = 1.0f;
  });
  // The best of a plain stream (hardware prefetch only) and streams with software
  // prefetches 1 and 4 KiB ahead into L1, alone and with prefetches 8 KiB further into L2, as
  // the decode kernels issue them: the limit is what reading can reach, not what one access
  // pattern does (measured: 27.3 GB/s plain, and the Q8_0 decode kernel itself read 33 GB/s,
  // on one Xeon host).
  if (use_avx2()) {
    double best = 0;
    for (int far : {0, 8192})
      for (int prefetch : {0, 1024, 4096})
        if (prefetch || !far) best = std::max(best, read_gb_per_s_avx2(data, n, reps, prefetch, far));
    return best;
  }
  using clock = std::chrono::steady_clock;
  double best = 0;
  std::vector<float> sink(static_cast<size_t>(num_threads()));
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock::now();
    parallel_for(int64_t(n), [&](int64_t b, int64_t e, int thread) {
      float s = 0;
      for (int64_t i = b; i < e; ++i) s += data[i];
      sink[size_t(thread)] = s;
    });
    best = std::max(best, double(n) * 4 / std::chrono::duration<double>(clock::now() - t0).count() / 1e9);
  }
  return best;
}

double measure_fma_gflops(int reps) {
  if (use_avx2()) return gemm_avx512() ? fma_gflops_avx512(reps) : fma_gflops_avx2(reps);
  using clock = std::chrono::steady_clock;
  constexpr int64_t kIters = 20'000'000;
  double best = 0;
  std::vector<float> sink(static_cast<size_t>(num_threads()));
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock::now();
    parallel_for(num_threads(), [&](int64_t, int64_t, int thread) {
      float a = 1, b = 2, c = 3, d = 4;
      for (int64_t i = 0; i < kIters / 4; ++i) a = a * 0.999f + 1e-7f, b = b * 0.999f + 1e-7f, c = c * 0.999f + 1e-7f, d = d * 0.999f + 1e-7f;
      sink[size_t(thread)] = a + b + c + d;
    });
    best = std::max(best, double(num_threads()) * double(kIters) * 2 / std::chrono::duration<double>(clock::now() - t0).count() / 1e9);
  }
  return best;
}

}  // namespace mtb::kernels
