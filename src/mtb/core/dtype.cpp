#include "mtb/core/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace mtb {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::Q8_0: return 0;
  }
  return 0;
}

size_t dtype_bytes(DType t, int64_t n) {
  if (t == DType::Q8_0) return size_t(n / kQ8Block) * kQ8BlockBytes;
  return size_t(n) * dtype_size(t);
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0: return "Q8_0";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  if (name == "F32") *out = DType::F32;
  else if (name == "F16") *out = DType::F16;
  else if (name == "BF16") *out = DType::BF16;
  else return false;
  return true;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do { mant <<= 1; ++e; } while (!(mant & 0x400));
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  uint32_t absbits = bits & 0x7fffffffu;
  if (absbits > 0x7f800000u) return sign | 0x7e00;        // NaN
  if (absbits >= 0x477ff000u) return sign | 0x7c00;       // overflow to inf
  if (absbits < 0x38800000u) {                             // subnormal or zero
    float a;
    std::memcpy(&a, &absbits, 4);
    return sign | uint16_t(std::nearbyint(a * 16777216.0f));  // a / 2^-24, ties to even
  }
  uint32_t r = absbits + 0xfffu + ((absbits >> 13) & 1u);  // round to nearest even
  return sign | uint16_t((r - 0x38000000u) >> 13);
}

void to_f32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::Q8_0: {
      auto b = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; i += kQ8Block, b += kQ8BlockBytes) {
        uint16_t h;
        std::memcpy(&h, b, 2);
        const float d = f16_to_f32(h);
        const auto* q = reinterpret_cast<const int8_t*>(b + 2);
        for (int j = 0; j < kQ8Block; ++j) dst[i + size_t(j)] = d * float(q[j]);
      }
      return;
    }
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      auto s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
  }
}

void from_f32(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::Q8_0: {
      auto b = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; i += kQ8Block, b += kQ8BlockBytes) {
        float amax = 0.0f;
        for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(src[i + size_t(j)]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        const uint16_t h = f32_to_f16(d);
        std::memcpy(b, &h, 2);
        auto* q = reinterpret_cast<int8_t*>(b + 2);
        for (int j = 0; j < kQ8Block; ++j) q[j] = int8_t(std::lround(src[i + size_t(j)] * id));
      }
      return;
    }
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
  }
}

}  // namespace mtb
