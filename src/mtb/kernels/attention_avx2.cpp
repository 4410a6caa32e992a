// AVX2+FMA causal attention: (row, head) pairs split over the pool's threads, K and V read
// in their stored type (F32, BF16, F16) and widened in registers.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/attention.h"

namespace mtb::kernels {
namespace {

using avx2::load1;
using avx2::load8;

// q[0..n) · k[k0 .. k0+n)
template <DType T>
inline float dot(const float* q, const void* k, int64_t k0, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<T>(k, k0 + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8<T>(k, k0 + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<T>(k, k0 + i), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += q[i] * load1<T>(k, k0 + i);
  return r;
}

// o[0..n) += w * v[v0 .. v0+n)
template <DType T>
inline void axpy(float* o, float w, const void* v, int64_t v0, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(o + i, _mm256_fmadd_ps(wv, load8<T>(v, v0 + i), _mm256_loadu_ps(o + i)));
  for (; i < n; ++i) o[i] += w * load1<T>(v, v0 + i);
}

// Query heads that share a kv head are processed together, so each key and value row is
// read once per task and reused from L1 by every head of the task. A task is (query row,
// kv head, a slice of that kv head's query heads); slices exist only to give every thread
// work when there are few rows (decoding) and few kv heads (MQA, MLA's absorbed form).
template <DType T>
void run(const AttentionArgs& a, float* scratch, int64_t scratch_per_thread) {
  const int group = a.n_heads / a.n_kv_heads;
  const int rows_x_kv = a.n_queries * a.n_kv_heads;
  const int slices = std::min(group, std::max(1, (2 * num_threads() + rows_x_kv - 1) / rows_x_kv));
  const int per_slice = (group + slices - 1) / slices;
  const int tasks = rows_x_kv * slices;
  const double work = double(a.n_queries) * (a.q_pos0 + a.n_queries) * a.n_heads * (a.qk_dim + a.v_dim);
  parallel_for(tasks, [&](int64_t t0, int64_t t1, int thread) {
    float* p = scratch + thread * scratch_per_thread;  // scores [heads of the task][keys]
    for (int64_t task = t0; task < t1; ++task) {
      const int i = int(task / (int64_t(a.n_kv_heads) * slices));
      const int kvh = int(task / slices % a.n_kv_heads), slice = int(task % slices);
      const int h0 = kvh * group + slice * per_slice, h1 = std::min(h0 + per_slice, (kvh + 1) * group);
      const int nh = h1 - h0;
      if (nh <= 0) continue;
      const int n_keys = a.q_pos0 + i + 1;
      const float* q = a.q + i * a.q_stride + int64_t(h0) * a.qk_dim;
      for (int j = 0; j < n_keys; ++j) {
        const int64_t k0 = j * a.k_stride + int64_t(kvh) * a.qk_dim;
        for (int g = 0; g < nh; ++g) p[g * n_keys + j] = dot<T>(q + int64_t(g) * a.qk_dim, a.k, k0, a.qk_dim) * a.scale;
      }
      for (int g = 0; g < nh; ++g) {
        float* pg = p + g * n_keys;
        float mx = -INFINITY;
        for (int j = 0; j < n_keys; ++j) mx = std::max(mx, pg[j]);
        float sum = 0.0f;
        for (int j = 0; j < n_keys; ++j) sum += pg[j] = std::exp(pg[j] - mx);
        const float inv = 1.0f / sum;
        for (int j = 0; j < n_keys; ++j) pg[j] *= inv;
        float* o = a.out + i * a.out_stride + int64_t(h0 + g) * a.v_dim;
        for (int d = 0; d < a.v_dim; ++d) o[d] = 0.0f;
      }
      float* o = a.out + i * a.out_stride + int64_t(h0) * a.v_dim;
      for (int j = 0; j < n_keys; ++j) {
        const int64_t v0 = j * a.v_stride + int64_t(kvh) * a.v_dim;
        for (int g = 0; g < nh; ++g) axpy<T>(o + int64_t(g) * a.v_dim, p[g * n_keys + j], a.v, v0, a.v_dim);
      }
    }
  }, work < 1e5);
}

}  // namespace

void attention_avx2(const AttentionArgs& a) {
  const int max_keys = a.q_pos0 + a.n_queries;
  const int group = a.n_heads / a.n_kv_heads;
  std::vector<float> own;
  float* scratch = a.scratch;
  if (!scratch) {
    own.resize(attention_scratch_floats(max_keys, a.n_heads));
    scratch = own.data();
  }
  switch (a.kv_type) {
    case DType::F32: run<DType::F32>(a, scratch, int64_t(max_keys) * group); return;
    case DType::BF16: run<DType::BF16>(a, scratch, int64_t(max_keys) * group); return;
    case DType::F16: run<DType::F16>(a, scratch, int64_t(max_keys) * group); return;
    case DType::Q8_0: break;  // never a KV cache type
  }
}

}  // namespace mtb::kernels
