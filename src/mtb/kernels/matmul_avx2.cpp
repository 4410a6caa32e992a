// AVX2+FMA matrix product y = x · W^T. Compiled with -mavx2 -mfma -mf16c; only called
// when the CPU has them (see cpu.h). Threads split the rows of W. Weights are read in their
// stored type (F32, BF16, F16, Q8_0) and widened to float in registers, never converted up
// front: decoding streams each weight byte once.
#include <immintrin.h>

#include <cstring>

#include "mtb/core/parallel.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/matmul.h"

namespace mtb::kernels {
namespace {

// Eight consecutive weights as floats (plain types).
using avx2::load1;
using avx2::load8;

using avx2::hsum;

// y[m0..m0+MR) x [n0..n0+NR): MR rows of x against NR rows of W.
template <DType T, int MR, int NR>
inline void tile(float* y, const float* x, const void* w, const float* bias, int m0, int n0, int N, int K) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  const size_t row_bytes = dtype_bytes(T, K);
  const uint8_t* wr[NR];
  for (int j = 0; j < NR; ++j) wr[j] = static_cast<const uint8_t*>(w) + size_t(n0 + j) * row_bytes;
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = x + size_t(m0 + i) * size_t(K);
  int k = 0;
  if constexpr (T == DType::Q8_0) {
    // One block of 32 per step: scale the int8 weights by the block's fp16 scale, 8 at a time.
    for (int b = 0; k < K; ++b, k += kQ8Block) {
      __m256 d[NR];
      for (int j = 0; j < NR; ++j) {
        uint16_t h;
        std::memcpy(&h, wr[j] + size_t(b) * kQ8BlockBytes, 2);
        d[j] = _mm256_set1_ps(f16_to_f32(h));
      }
      for (int s = 0; s < 4; ++s) {
        __m256 wv[NR];
        for (int j = 0; j < NR; ++j) {
          const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr[j] + size_t(b) * kQ8BlockBytes + 2 + s * 8));
          wv[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d[j]);
        }
        for (int i = 0; i < MR; ++i) {
          const __m256 xv = _mm256_loadu_ps(xr[i] + k + s * 8);
          for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) y[size_t(m0 + i) * N + n0 + j] = hsum(acc[i][j]) + (bias ? bias[n0 + j] : 0.0f);
  } else {
    for (; k + 8 <= K; k += 8) {
      __m256 wv[NR];
      for (int j = 0; j < NR; ++j) wv[j] = load8<T>(wr[j], k);
      for (int i = 0; i < MR; ++i) {
        const __m256 xv = _mm256_loadu_ps(xr[i] + k);
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        float s = hsum(acc[i][j]);
        for (int kk = k; kk < K; ++kk) s += xr[i][kk] * load1<T>(wr[j], kk);
        y[size_t(m0 + i) * N + n0 + j] = s + (bias ? bias[n0 + j] : 0.0f);
      }
  }
}

// Rows [n0, n1) of W against MR rows of x, NR rows of W at a time.
template <DType T, int MR, int NR>
inline void rows(float* y, const float* x, const void* w, const float* bias, int m0, int n0, int n1, int N, int K) {
  int n = n0;
  for (; n + NR <= n1; n += NR) tile<T, MR, NR>(y, x, w, bias, m0, n, N, K);
  for (; n < n1; ++n) tile<T, MR, 1>(y, x, w, bias, m0, n, N, K);
}

template <DType T>
void run(float* y, const float* x, const void* w, const float* bias, int M, int N, int K) {
  // Work is split over blocks of W rows, so each thread streams its own part of the weights;
  // within a block, 4 rows of x meet 2 rows of W (8 accumulators), and the last 1-3 rows of
  // x (all of decoding) meet 4 rows of W at a time.
  constexpr int NB = 16;
  const int nblocks = (N + NB - 1) / NB;
  const double flops = 2.0 * M * N * double(K);
  parallel_for(nblocks, [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      const int n0 = int(b) * NB, n1 = n0 + NB < N ? n0 + NB : N;
      int m = 0;
      for (; m + 4 <= M; m += 4) rows<T, 4, 2>(y, x, w, bias, m, n0, n1, N, K);
      for (; m < M; ++m) rows<T, 1, 4>(y, x, w, bias, m, n0, n1, N, K);
    }
  }, flops < 2e5);
}

}  // namespace

void matmul_avx2(float* y, const float* x, const void* w, DType wtype, const float* bias, int M, int N, int K) {
  switch (wtype) {
    case DType::F32: run<DType::F32>(y, x, w, bias, M, N, K); return;
    case DType::BF16: run<DType::BF16>(y, x, w, bias, M, N, K); return;
    case DType::F16: run<DType::F16>(y, x, w, bias, M, N, K); return;
    case DType::Q8_0: run<DType::Q8_0>(y, x, w, bias, M, N, K); return;
  }
}

}  // namespace mtb::kernels
