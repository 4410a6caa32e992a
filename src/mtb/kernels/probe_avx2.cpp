// The machine probes of probe.h. AVX2 when the CPU has it (AVX-512 FMAs where the GEMM uses
// them); the scalar fallback is probe.cpp's (it measures what the scalar kernels could reach).
#include <immintrin.h>

#include <chrono>
#include <vector>

#include "mtb/core/parallel.h"

namespace mtb::kernels {

double read_gb_per_s_avx2(const float* data, size_t n, int reps, int prefetch, int far) {
  using clock = std::chrono::steady_clock;
  double best = 0;
  std::vector<float> sink(size_t(num_threads()) * 8);
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock::now();
    parallel_for(num_threads(), [&](int64_t b, int64_t e, int thread) {
      for (int64_t part = b; part < e; ++part) {
        const size_t lo = n * size_t(part) / size_t(num_threads()) & ~size_t(31);
        const size_t hi = n * size_t(part + 1) / size_t(num_threads()) & ~size_t(31);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = lo; i < hi; i += 32) {
          if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(data + i) + prefetch, _MM_HINT_T0),
                        _mm_prefetch(reinterpret_cast<const char*>(data + i) + prefetch + 64, _MM_HINT_T0);
          if (far) _mm_prefetch(reinterpret_cast<const char*>(data + i) + prefetch + far, _MM_HINT_T2),
                   _mm_prefetch(reinterpret_cast<const char*>(data + i) + prefetch + far + 64, _MM_HINT_T2);
          a0 = _mm256_add_ps(a0, _mm256_load_ps(data + i));
          a1 = _mm256_add_ps(a1, _mm256_load_ps(data + i + 8));
          a2 = _mm256_add_ps(a2, _mm256_load_ps(data + i + 16));
          a3 = _mm256_add_ps(a3, _mm256_load_ps(data + i + 24));
        }
        _mm256_storeu_ps(&sink[size_t(thread) * 8], _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      }
    });
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, double(n) * 4 / s / 1e9);
  }
  return best;
}

// One thread's 512-bit FMA chains (32 would cover 2 ports x 4 cycles of latency with room;
// 12 independent ones are enough on every core we met), summed into out[0..16).
__attribute__((target("avx512f"))) void fma_chains_avx512(int64_t iters, float* out) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  _mm512_storeu_ps(out, s);
}

// The FMA peak with 512-bit FMAs (only called where the CPU has AVX-512F).
double fma_gflops_avx512(int reps) {
  using clock = std::chrono::steady_clock;
  constexpr int64_t kIters = 20'000'000 / 12;
  double best = 0;
  std::vector<float> sink(size_t(num_threads()) * 16);
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock::now();
    parallel_for(num_threads(), [&](int64_t b, int64_t e, int thread) {
      for (int64_t part = b; part < e; ++part) fma_chains_avx512(kIters, &sink[size_t(thread) * 16]);
    });
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, double(num_threads()) * double(kIters) * 12 * 16 * 2 / s / 1e9);
  }
  return best;
}

double fma_gflops_avx2(int reps) {
  using clock = std::chrono::steady_clock;
  constexpr int64_t kIters = 20'000'000;
  double best = 0;
  std::vector<float> sink(size_t(num_threads()) * 8);
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock::now();
    parallel_for(num_threads(), [&](int64_t b, int64_t e, int thread) {
      for (int64_t part = b; part < e; ++part) {
        // Ten independent chains hide the FMA latency on two FMA ports.
        __m256 acc[10];
        for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(float(i));
        const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
        for (int64_t it = 0; it < kIters / 10; ++it)
          for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
        __m256 s = acc[0];
        for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, acc[i]);
        _mm256_storeu_ps(&sink[size_t(thread) * 8], s);
      }
    });
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, double(num_threads()) * double(kIters) * 8 * 2 / s / 1e9);
  }
  return best;
}

}  // namespace mtb::kernels
