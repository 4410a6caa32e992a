// AVX2+FMA causal attention: one (row, head) pair per task, split over the pool's threads. Rows are interleaved with
// heads so the causal triangle's work spreads evenly.
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/attention.h"

namespace mtb::kernels {
namespace {

inline float dot(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// o[0..n) += w * v[0..n)
inline void axpy(float* o, float w, const float* v, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(o + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(o + i)));
  for (; i < n; ++i) o[i] += w * v[i];
}

}  // namespace

void attention_avx2(const AttentionArgs& a) {
  const int group = a.n_heads / a.n_kv_heads;
  const int tasks = a.n_queries * a.n_heads;
  const double work = double(a.n_queries) * (a.q_pos0 + a.n_queries) * a.n_heads * (a.qk_dim + a.v_dim);
  parallel_for(tasks, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(size_t(a.q_pos0 + a.n_queries));  // scores of one row
    for (int64_t task = t0; task < t1; ++task) {
      const int i = int(task / a.n_heads), h = int(task % a.n_heads);
      const int n_keys = a.q_pos0 + i + 1;
      const int kvh = h / group;
      const float* q = a.q + i * a.q_stride + int64_t(h) * a.qk_dim;
      float mx = -INFINITY;
      for (int j = 0; j < n_keys; ++j) {
        p[j] = dot(q, a.k + j * a.k_stride + int64_t(kvh) * a.qk_dim, a.qk_dim) * a.scale;
        mx = std::max(mx, p[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j < n_keys; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      float* o = a.out + i * a.out_stride + int64_t(h) * a.v_dim;
      for (int d = 0; d < a.v_dim; ++d) o[d] = 0.0f;
      const float inv = 1.0f / sum;
      for (int j = 0; j < n_keys; ++j)
        axpy(o, p[j] * inv, a.v + j * a.v_stride + int64_t(kvh) * a.v_dim, a.v_dim);
    }
  }, work < 1e5);
}

}  // namespace mtb::kernels
