// Helpers shared by the AVX2 kernels: stored elements (F32, BF16, F16) widened to float in
// registers, a horizontal sum, an 8 x 8 transpose, and e^x eight lanes at a time. Include only from *_avx2.cpp files (compiled with
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

// In-register 8x8 transpose: on return r[k] holds element k of each input row.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
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
