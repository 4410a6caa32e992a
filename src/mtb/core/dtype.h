// Element types of stored tensors and their conversions to and from float.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace mtb {

// Q8_0 (as in GGUF): blocks of 32 values stored as one fp16 scale d and 32 int8 q,
// value = d * q; 34 bytes per block. Its rows must hold a multiple of 32 elements.
enum class DType { F32, F16, BF16, Q8_0 };

inline constexpr int kQ8Block = 32;
inline constexpr int kQ8BlockBytes = 34;

// Bytes per element for the plain types (Q8_0: 0; use dtype_bytes).
size_t dtype_size(DType t);
// Bytes of n consecutive elements (for Q8_0, n must be a multiple of 32).
size_t dtype_bytes(DType t, int64_t n);
const char* dtype_name(DType t);             // "F32", "F16", "BF16", "Q8_0" (safetensors spelling for the first three)
bool dtype_from_name(const std::string& name, DType* out);  // safetensors dtypes only

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// dst[i] = float(src[i]) for n elements of type t (Q8_0: whole blocks).
void to_f32(DType t, const void* src, float* dst, size_t n);
// dst[i] = src[i] rounded to type t (round to nearest even) for n elements. Q8_0: per block
// d = max|x| / 127 (stored as fp16), q = round(x / d), as ggml's reference quantizer does.
void from_f32(DType t, const float* src, void* dst, size_t n);

}  // namespace mtb
