#include "mtb/tools/init.h"

#include <cmath>
#include <cstring>

#include "mtb/core/parallel.h"
#include "mtb/model/weights.h"

namespace mtb {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Fills n standard normals from a stream seeded by `seed` (Box-Muller).
void normals(float* out, int64_t n, uint64_t seed, float std) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = (double(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = double(splitmix64(s) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    out[i] = float(r * std::cos(a)) * std;
    if (i + 1 < n) out[i + 1] = float(r * std::sin(a)) * std;
  }
}

}  // namespace

TensorMap init_weights(const ModelConfig& c, uint64_t seed, DType dtype, float std) {
  TensorMap m;
  constexpr int64_t kChunk = 1 << 16;  // each chunk has its own stream: same values on any thread count
  for (const TensorSpec& s : expected_tensors(c)) {
    const int64_t n = shape_numel(s.shape);
    std::vector<float> v(static_cast<size_t>(n));
    const bool is_bias = s.name.ends_with(".bias");
    if (s.role == TensorRole::Vector) {
      std::fill(v.begin(), v.end(), is_bias ? 0.0f : 1.0f);
    } else {
      const uint64_t base = hash_name(s.name) ^ (seed * 0x9e3779b97f4a7c15ull);
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      parallel_for(chunks, [&](int64_t c0, int64_t c1, int) {
        for (int64_t ch = c0; ch < c1; ++ch)
          normals(v.data() + ch * kChunk, std::min(kChunk, n - ch * kChunk), base + uint64_t(ch) * 0x632be59bd9b4e019ull, std);
      });
    }
    // Norm scales and biases stay F32 when the matrices are Q8_0 (as llama.cpp keeps them).
    const DType t = dtype == DType::Q8_0 && (s.role == TensorRole::Vector || s.shape.back() % kQ8Block) ? DType::F32 : dtype;
    std::vector<uint8_t> bytes(dtype_bytes(t, n));
    from_f32(t, v.data(), bytes.data(), size_t(n));
    m.add_owned(s.name, t, s.shape, std::move(bytes), "init");
  }
  return m;
}

}  // namespace mtb
