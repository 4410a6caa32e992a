// AVX2+FMA causal attention for training, forward and backward. Tasks are (sequence,
// kv head) pairs split over the pool's threads: a task handles every query head of its
// group, so the dk/dv rows of a kv head have a single writer and results do not depend on
// the thread count. Exponentials are computed eight at a time (exp8 below).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/attention_grad.h"

namespace mtb::kernels {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float dot(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float r = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// y[0..n) += w x[0..n)
inline void axpy(float* y, float w, const float* x, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += w * x[i];
}

// e^x for x <= 0 (softmax arguments), eight lanes: Cephes' range reduction and polynomial.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// p[j] = exp(p[j] - sub) for j < n; returns the sum.
inline float exp_shift(float* p, int n, float sub) {
  const __m256 s = _mm256_set1_ps(sub);
  __m256 acc = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), s));
    _mm256_storeu_ps(p + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  for (; j < n; ++j) sum += p[j] = std::exp(p[j] - sub);
  return sum;
}

struct Scratch {
  std::vector<float> p, ds, acc;
};

}  // namespace

void attention_train_forward_avx2(const AttentionTrainArgs& a) {
  const int group = a.n_heads / a.n_kv_heads, T = a.seq_len;
  const double work = double(a.n_seqs) * T * T * a.n_heads * (a.qk_dim + a.v_dim);
  parallel_for(int64_t(a.n_seqs) * a.n_kv_heads, [&](int64_t t0, int64_t t1, int) {
    thread_local Scratch sc;
    if (sc.p.size() < size_t(T)) sc.p.resize(size_t(T));
    float* p = sc.p.data();
    for (int64_t task = t0; task < t1; ++task) {
      const int s = int(task / a.n_kv_heads), kvh = int(task % a.n_kv_heads);
      const float* k0 = a.k + int64_t(s) * T * a.k_stride + int64_t(kvh) * a.qk_dim;
      const float* v0 = a.v + int64_t(s) * T * a.v_stride + int64_t(kvh) * a.v_dim;
      for (int h = kvh * group; h < (kvh + 1) * group; ++h)
        for (int i = 0; i < T; ++i) {
          const int64_t row = int64_t(s) * T + i;
          const float* q = a.q + row * a.q_stride + int64_t(h) * a.qk_dim;
          float mx = -INFINITY;
          for (int j = 0; j <= i; ++j) {
            p[j] = dot(q, k0 + j * a.k_stride, a.qk_dim) * a.scale;
            mx = std::max(mx, p[j]);
          }
          const float sum = exp_shift(p, i + 1, mx);
          const float inv = 1.0f / sum;
          float* o = a.out + row * a.out_stride + int64_t(h) * a.v_dim;
          std::fill(o, o + a.v_dim, 0.0f);
          for (int j = 0; j <= i; ++j) axpy(o, p[j] * inv, v0 + j * a.v_stride, a.v_dim);
          a.lse[row * a.n_heads + h] = mx + std::log(sum);
        }
    }
  }, work < 1e5);
}

void attention_train_backward_avx2(const AttentionTrainArgs& a) {
  const int group = a.n_heads / a.n_kv_heads, T = a.seq_len;
  const double work = double(a.n_seqs) * T * T * a.n_heads * (a.qk_dim + a.v_dim);
  parallel_for(int64_t(a.n_seqs) * a.n_kv_heads, [&](int64_t t0, int64_t t1, int) {
    thread_local Scratch sc;
    if (sc.p.size() < size_t(T)) sc.p.resize(size_t(T)), sc.ds.resize(size_t(T));
    if (sc.acc.size() < size_t(a.qk_dim)) sc.acc.resize(size_t(a.qk_dim));
    float *p = sc.p.data(), *ds = sc.ds.data();
    for (int64_t task = t0; task < t1; ++task) {
      const int s = int(task / a.n_kv_heads), kvh = int(task % a.n_kv_heads);
      const int64_t r0 = int64_t(s) * T;
      const float* k0 = a.k + r0 * a.k_stride + int64_t(kvh) * a.qk_dim;
      const float* v0 = a.v + r0 * a.v_stride + int64_t(kvh) * a.v_dim;
      float* dk0 = a.dk + r0 * a.k_stride + int64_t(kvh) * a.qk_dim;
      float* dv0 = a.dv + r0 * a.v_stride + int64_t(kvh) * a.v_dim;
      for (int j = 0; j < T; ++j) {
        std::fill(dk0 + j * a.k_stride, dk0 + j * a.k_stride + a.qk_dim, 0.0f);
        std::fill(dv0 + j * a.v_stride, dv0 + j * a.v_stride + a.v_dim, 0.0f);
      }
      for (int h = kvh * group; h < (kvh + 1) * group; ++h)
        for (int i = 0; i < T; ++i) {
          const int64_t row = r0 + i;
          const float* q = a.q + row * a.q_stride + int64_t(h) * a.qk_dim;
          const float* o = a.out + row * a.out_stride + int64_t(h) * a.v_dim;
          const float* dout = a.dout + row * a.dout_stride + int64_t(h) * a.v_dim;
          const float lse = a.lse[row * a.n_heads + h];
          const float di = dot(dout, o, a.v_dim);
          for (int j = 0; j <= i; ++j) {
            p[j] = dot(q, k0 + j * a.k_stride, a.qk_dim) * a.scale;
            ds[j] = dot(dout, v0 + j * a.v_stride, a.v_dim);
          }
          exp_shift(p, i + 1, lse);
          float* acc = sc.acc.data();
          std::fill(acc, acc + a.qk_dim, 0.0f);
          for (int j = 0; j <= i; ++j) {
            const float g = p[j] * (ds[j] - di) * a.scale;
            axpy(acc, g, k0 + j * a.k_stride, a.qk_dim);
            axpy(dk0 + j * a.k_stride, g, q, a.qk_dim);
            axpy(dv0 + j * a.v_stride, p[j], dout, a.v_dim);
          }
          std::copy(acc, acc + a.qk_dim, a.dq + row * a.q_stride + int64_t(h) * a.qk_dim);
        }
    }
  }, work < 1e5);
}

}  // namespace mtb::kernels
