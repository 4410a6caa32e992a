// Vector width as a type, for kernels written once and compiled for 256- and 512-bit
// registers (see attention_avx2.cpp): Vec256 (AVX2+FMA) and Vec512 (AVX-512F/BW/DQ, its
// functions compiled for that target, so only callable from code compiled for it). Each
// holds kLanes floats and offers the same few operations. Include only from *_avx2.cpp files.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "mtb/core/dtype.h"
#include "mtb/kernels/load_avx2.h"

namespace mtb::kernels {

struct Vec256 {
  using F = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kRegs = 16;  // vector registers
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F exp(F x) { return avx2::exp8(x); }
  // Elements p[i .. i + kLanes) of type T as floats.
  template <DType T> static F load(const void* p, int64_t i) { return avx2::load8<T>(p, i); }
  // The sums of lanes 8j..8j+8 folded to 8 lanes (here: v itself).
  static __m256 fold8(F v) { return v; }
};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
struct Vec512 {
  using F = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kRegs = 32;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  // (The masked forms throughout: GCC 12 warns on the unmasked ones.)
  static constexpr __mmask16 kAll = 0xffff;
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F max(F a, F b) { return _mm512_maskz_max_ps(kAll, a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  // avx2::exp8's steps, sixteen lanes at a time (the same results lane for lane).
  static F exp(F x) {
    x = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, x, set1(-87.33654f)), set1(88.72283f));
    const F n = _mm512_maskz_roundscale_ps(kAll, mul(x, set1(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    F p = set1(1.9875691500e-4f);
    p = fmadd(p, r, set1(1.3981999507e-3f));
    p = fmadd(p, r, set1(8.3334519073e-3f));
    p = fmadd(p, r, set1(4.1665795894e-2f));
    p = fmadd(p, r, set1(1.6666665459e-1f));
    p = fmadd(p, r, set1(5.0000001201e-1f));
    p = fmadd(p, mul(r, r), add(r, set1(1.0f)));
    const __m512i ni = _mm512_maskz_cvtps_epi32(kAll, n);
    const __mmask16 top = _mm512_cmpgt_epi32_mask(ni, _mm512_set1_epi32(127));
    const __m512i e = _mm512_maskz_slli_epi32(
        kAll, _mm512_add_epi32(_mm512_mask_sub_epi32(ni, top, ni, _mm512_set1_epi32(1)), _mm512_set1_epi32(127)), 23);
    p = mul(p, _mm512_castsi512_ps(e));
    return _mm512_mask_add_ps(p, top, p, p);  // the 2 of 2 * 2^127
  }
  template <DType T> static F load(const void* p, int64_t i) {
    if constexpr (T == DType::F32) {
      return _mm512_loadu_ps(static_cast<const float*>(p) + i);
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
      if constexpr (T == DType::BF16)
        return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xffff), _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), h), 16));
      else
        return _mm512_maskz_cvtph_ps(__mmask16(0xffff), h);
    }
  }
  static __m256 fold8(F v) {  // (through memory: GCC 12 warns on every extract form)
    alignas(64) float t[16];
    _mm512_store_ps(t, v);
    return _mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(t + 8));
  }
};
#pragma GCC pop_options

}  // namespace mtb::kernels
