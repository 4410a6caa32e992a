// Helpers shared by the AVX2 kernels: stored elements (F32, BF16, F16) widened to float in
// registers, a horizontal sum, and e^x eight lanes at a time. Include only from *_avx2.cpp files (compiled with
// -mavx2 -mfma -mf16c).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "mtb/core/dtype.h"

namespace mtb::kernels::avx2 {

// Eight consecutive elements p[i..i+8) as floats.
template <DType T> inline __m256 load8(const void* p, int64_t i);
template <> inline __m256 load8<DType::F32>(const void* p, int64_t i) {
  return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}
template <> inline __m256 load8<DType::BF16>(const void* p, int64_t i) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
template <> inline __m256 load8<DType::F16>(const void* p, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
}

// One element p[i] as a float.
template <DType T> inline float load1(const void* p, int64_t i);
template <> inline float load1<DType::F32>(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
template <> inline float load1<DType::BF16>(const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); }
template <> inline float load1<DType::F16>(const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); }

// e^x for 8 floats: x = n ln2 + r with n = round(x / ln2), |r| <= ln2/2, e^r from a degree-6
// polynomial (Cephes' expf coefficients), times 2^n built in the exponent bits. Relative
// error under 3e-7 (kernels_test checks it against std::exp). x is clamped to
// [-87.3, 88.7]: below, the result is about 1e-38 instead of smaller; above, about 3e38.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.72283f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2, ln2 split in two so that n * hi is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n for n in [-126, 128]: n = 128 (x near the top) as 2 * 2^127.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i top = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, _mm256_and_si256(top, _mm256_set1_epi32(1))),
                                                       _mm256_set1_epi32(127)), 23);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_add_ps(p, _mm256_and_ps(_mm256_castsi256_ps(top), p));  // the 2 of 2 * 2^127
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The largest of v's eight lanes.
inline float hmax(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

// The largest of p[0..n), n >= 1.
inline float max_of(const float* p, int n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(p + j));
  float r = hmax(m);
  for (; j < n; ++j) r = r < p[j] ? p[j] : r;
  return r;
}

}  // namespace mtb::kernels::avx2
