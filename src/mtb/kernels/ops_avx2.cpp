// AVX2+FMA twins of ops.h's element-wise kernels (compiled with -mavx2 -mfma -mf16c; only
// called when the CPU has them).
#include <immintrin.h>

#include <algorithm>

#include <cmath>

#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/ops.h"
#include "mtb/kernels/vec_avx.h"

namespace mtb::kernels {

void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = avx2::exp8(_mm256_xor_ps(g, sign));  // e^-g
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {  // the last 1-7 through the same vector steps (padded), so every element gets the
               // same bits wherever it falls: a row's results must not depend on the batch
    alignas(32) float g8[8] = {}, u8[8] = {};
    std::copy(gate + i, gate + n, g8), std::copy(up + i, up + n, u8);
    const __m256 g = _mm256_load_ps(g8);
    const __m256 e = avx2::exp8(_mm256_xor_ps(g, sign));
    _mm256_store_ps(g8, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_load_ps(u8)));
    std::copy(g8, g8 + (n - i), gate + i);
  }
}

void rmsnorm_avx2(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* g,
                  int rows, int n, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256 a = _mm256_loadu_ps(xr + i), b = _mm256_loadu_ps(xr + i + 8);
      s0 = _mm256_fmadd_ps(a, a, s0), s1 = _mm256_fmadd_ps(b, b, s1);
    }
    for (; i + 8 <= n; i += 8) {
      const __m256 a = _mm256_loadu_ps(xr + i);
      s0 = _mm256_fmadd_ps(a, a, s0);
    }
    float ss = avx2::hsum(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    const __m256 iv = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(_mm256_loadu_ps(xr + i), iv)));
    for (; i < n; ++i) o[i] = g[i] * (xr[i] * inv);
  }
}

void exp_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, avx2::exp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void exp_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) Vec512::storeu(y + i, Vec512::exp(Vec512::loadu(x + i)));
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace mtb::kernels
