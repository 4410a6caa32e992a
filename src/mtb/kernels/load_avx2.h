// Loads shared by the AVX2 kernels: stored elements (F32, BF16, F16) widened to float in
// registers, and a horizontal sum. Include only from *_avx2.cpp files (compiled with
// -mavx2 -mfma -mf16c).
#pragma once
#include <immintrin.h>

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

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace mtb::kernels::avx2
