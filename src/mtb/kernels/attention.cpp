#include "mtb/kernels/attention.h"

#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/cpu.h"

namespace mtb::kernels {

size_t attention_scratch_floats(int max_keys, int max_heads) {
  return size_t(num_threads()) * size_t(max_keys > 0 ? max_keys : 1) * size_t(max_heads > 0 ? max_heads : 1);
}

void attention(const AttentionArgs& a) {
  if (use_avx2()) attention_avx2(a);
  else attention_ref(a);
}

namespace {

float element(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::Q8_0: break;  // never a KV cache type
  }
  return 0.0f;
}

}  // namespace

void attention_ref(const AttentionArgs& a) {
  const int group = a.n_heads / a.n_kv_heads;
  std::vector<float> own;  // only when the caller gave no scratch
  if (!a.scratch) own.resize(size_t(a.q_pos0 + a.n_queries));
  float* p = a.scratch ? a.scratch : own.data();
  for (int i = 0; i < a.n_queries; ++i) {
    const int n_keys = a.q_pos0 + i + 1;
    for (int h = 0; h < a.n_heads; ++h) {
      const int kvh = h / group;
      const float* q = a.q + i * a.q_stride + int64_t(h) * a.qk_dim;
      float mx = -INFINITY;
      for (int j = 0; j < n_keys; ++j) {
        const int64_t k0 = key_row(a, j) * a.k_stride + int64_t(kvh) * a.qk_dim;
        float s = 0.0f;
        for (int d = 0; d < a.qk_dim; ++d) s += q[d] * element(a.kv_type, a.k, k0 + d);
        p[j] = s * a.scale;
        mx = std::max(mx, p[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j < n_keys; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      float* o = a.out + i * a.out_stride + int64_t(h) * a.v_dim;
      for (int d = 0; d < a.v_dim; ++d) o[d] = 0.0f;
      for (int j = 0; j < n_keys; ++j) {
        const int64_t v0 = key_row(a, j) * a.v_stride + int64_t(kvh) * a.v_dim;
        const float w = p[j] / sum;
        for (int d = 0; d < a.v_dim; ++d) o[d] += w * element(a.kv_type, a.v, v0 + d);
      }
    }
  }
}

}  // namespace mtb::kernels
