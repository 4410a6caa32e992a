// Element types of stored tensors and their conversions to and from float.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace mtb {

enum class DType { F32, F16, BF16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);             // "F32", "F16", "BF16" (safetensors spelling)
bool dtype_from_name(const std::string& name, DType* out);

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

// dst[i] = float(src[i]) for n elements of type t.
void to_f32(DType t, const void* src, float* dst, size_t n);
// dst[i] = src[i] rounded to type t (round to nearest even) for n elements.
void from_f32(DType t, const float* src, void* dst, size_t n);

}  // namespace mtb
