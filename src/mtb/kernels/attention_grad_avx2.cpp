// AVX2+FMA causal attention for training, forward and backward. Tasks are (sequence,
// kv head) pairs split over the pool's threads: a task handles every query head of its
// group, so the dk/dv rows of a kv head have a single writer and results do not depend on
// the thread count. Exponentials are computed eight at a time (avx2::exp8).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/attention_grad.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/tasks.h"

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

using avx2::exp8;  // e^x, eight lanes (load_avx2.h)
using avx2::max_of;

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

// Per-row kernels: any head sizes. The blocked kernels below need sizes that are multiples of 8.

void forward_rows(const AttentionTrainArgs& a) {
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

void backward_rows(const AttentionTrainArgs& a) {
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


// ---------------------------------------------------------------- blocked kernels
// Query rows go in blocks of R = 4. For a block, the scores against every key it may see are
// one small matrix product with K^T (copied per task, padded to 16 keys), and P·V, dS·K,
// dS^T·Q, P^T·dO are register-blocked products too, so each K/V row is read once per block
// of rows rather than once per row.

constexpr int R = 4;

struct Blocked {
  std::vector<float> kt, vt;  // [qk][Tp], [dv][Tp]: this task's K^T and V^T
  std::vector<float> s, dp;   // [R][Tp]: scores / probabilities, and dP / dS
  std::vector<float> spill;   // outputs of rows past the end of the sequence
  std::vector<float> dk, dv;  // [T][qk], [T][dv]: this task's key/value gradients, copied out at
                              // its end (kv heads of one row share cache lines: no false sharing)
};

// out[r][j] = scale * sum_d x_r[d] * yt[d][j] for r < R, j < nk16 (a multiple of 16).
inline void scores(const float* const x[R], const float* yt, int64_t tp, int dim, int nk16, float scale, float* out,
                   int64_t out_stride) {
  const __m256 sc = _mm256_set1_ps(scale);
  for (int j = 0; j < nk16; j += 16) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int d = 0; d < dim; ++d) {
      const __m256 y0 = _mm256_loadu_ps(yt + d * tp + j), y1 = _mm256_loadu_ps(yt + d * tp + j + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_broadcast_ss(x[r] + d);
        acc[r][0] = _mm256_fmadd_ps(xb, y0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xb, y1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(out + r * out_stride + j, _mm256_mul_ps(acc[r][0], sc));
      _mm256_storeu_ps(out + r * out_stride + j + 8, _mm256_mul_ps(acc[r][1], sc));
    }
  }
}

// out_r[c] = sum_{j < nk} w[r][j] * y_j[c] for r < R, c < dim (a multiple of 8); y_j = y + j * y_stride.
inline void mix(const float* w, int64_t w_stride, const float* y, int64_t y_stride, int nk, int dim, float* const out[R]) {
  int c = 0;
  for (; c + 16 <= dim; c += 16) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int j = 0; j < nk; ++j) {
      const __m256 y0 = _mm256_loadu_ps(y + j * y_stride + c), y1 = _mm256_loadu_ps(y + j * y_stride + c + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 wb = _mm256_broadcast_ss(w + r * w_stride + j);
        acc[r][0] = _mm256_fmadd_ps(wb, y0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(wb, y1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(out[r] + c, acc[r][0]), _mm256_storeu_ps(out[r] + c + 8, acc[r][1]);
  }
  for (; c < dim; c += 8) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < nk; ++j) {
      const __m256 y0 = _mm256_loadu_ps(y + j * y_stride + c);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + r * w_stride + j), y0, acc[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(out[r] + c, acc[r]);
  }
}

// y_j[c] += sum_{r < rows} w[r][j] * x_r[c] for j < nk, c < dim (a multiple of 8). The rows
// of x are held in registers 16 columns at a time while j runs.
inline void scatter(const float* w, int64_t w_stride, const float* const x[R], int rows, int nk, int dim, float* y,
                    int64_t y_stride) {
  int c = 0;
  for (; c + 16 <= dim; c += 16) {
    __m256 x0[R], x1[R];
    for (int r = 0; r < R; ++r) {
      x0[r] = r < rows ? _mm256_loadu_ps(x[r] + c) : _mm256_setzero_ps();
      x1[r] = r < rows ? _mm256_loadu_ps(x[r] + c + 8) : _mm256_setzero_ps();
    }
    for (int j = 0; j < nk; ++j) {
      float* yj = y + j * y_stride + c;
      __m256 a0 = _mm256_loadu_ps(yj), a1 = _mm256_loadu_ps(yj + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 wb = _mm256_broadcast_ss(w + r * w_stride + j);
        a0 = _mm256_fmadd_ps(wb, x0[r], a0);
        a1 = _mm256_fmadd_ps(wb, x1[r], a1);
      }
      _mm256_storeu_ps(yj, a0);
      _mm256_storeu_ps(yj + 8, a1);
    }
  }
  for (; c < dim; c += 8) {
    __m256 x0[R];
    for (int r = 0; r < R; ++r) x0[r] = r < rows ? _mm256_loadu_ps(x[r] + c) : _mm256_setzero_ps();
    for (int j = 0; j < nk; ++j) {
      float* yj = y + j * y_stride + c;
      __m256 a0 = _mm256_loadu_ps(yj);
      for (int r = 0; r < R; ++r) a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(w + r * w_stride + j), x0[r], a0);
      _mm256_storeu_ps(yj, a0);
    }
  }
}

// dst[d][j] = src_j[d] for j < n, d < dim; zero for j in [n, tp).
void transpose_rows(const float* src, int64_t stride, int n, int dim, float* dst, int64_t tp) {
  for (int d = 0; d < dim; ++d) {
    float* row = dst + d * tp;
    for (int j = 0; j < n; ++j) row[j] = src[j * stride + d];
    std::fill(row + n, row + tp, 0.0f);
  }
}

bool blockable(const AttentionTrainArgs& a) { return a.qk_dim % 8 == 0 && a.v_dim % 8 == 0 && a.qk_dim > 0 && a.v_dim > 0; }

void forward_blocked(const AttentionTrainArgs& a) {
  const int group = a.n_heads / a.n_kv_heads, T = a.seq_len, tp = (T + 15) / 16 * 16;
  const double work = double(a.n_seqs) * T * T * a.n_heads * (a.qk_dim + a.v_dim);
  run_tasks(int64_t(a.n_seqs) * a.n_heads, [&](int64_t task, int) {  // (sequence, head)
    thread_local Blocked b;
    b.kt.resize(size_t(a.qk_dim) * tp), b.s.resize(size_t(R) * tp), b.spill.resize(size_t(R) * a.v_dim);
    const int s = int(task / a.n_heads), h = int(task % a.n_heads), kvh = h / group;
    const int64_t r0 = int64_t(s) * T;
    const float* k0 = a.k + r0 * a.k_stride + int64_t(kvh) * a.qk_dim;
    const float* v0 = a.v + r0 * a.v_stride + int64_t(kvh) * a.v_dim;
    transpose_rows(k0, a.k_stride, T, a.qk_dim, b.kt.data(), tp);
    for (int i0 = 0; i0 < T; i0 += R) {
      const int rows = std::min(R, T - i0), nk = i0 + rows, nk16 = (nk + 15) / 16 * 16;
      const float* q[R];
      float* o[R];
      for (int r = 0; r < R; ++r) {  // rows past the end repeat the last one and write to spill
        const int64_t row = r0 + i0 + std::min(r, rows - 1);
        q[r] = a.q + row * a.q_stride + int64_t(h) * a.qk_dim;
        o[r] = r < rows ? a.out + row * a.out_stride + int64_t(h) * a.v_dim : b.spill.data() + r * a.v_dim;
      }
      scores(q, b.kt.data(), tp, a.qk_dim, nk16, a.scale, b.s.data(), tp);
      for (int r = 0; r < R; ++r) {
        float* p = b.s.data() + r * tp;
        if (r >= rows) {
          std::fill(p, p + nk, 0.0f);
          continue;
        }
        const int n = i0 + r + 1;  // keys this row sees
        const float mx = max_of(p, n);
        const float sum = exp_shift(p, n, mx), inv = 1.0f / sum;
        for (int j = 0; j < n; ++j) p[j] *= inv;
        std::fill(p + n, p + nk, 0.0f);
        a.lse[(r0 + i0 + r) * a.n_heads + h] = mx + std::log(sum);
      }
      mix(b.s.data(), tp, v0, a.v_stride, nk, a.v_dim, o);
    }
  }, work < 1e5);
}

void backward_blocked(const AttentionTrainArgs& a) {
  const int group = a.n_heads / a.n_kv_heads, T = a.seq_len, tp = (T + 15) / 16 * 16;
  const double work = double(a.n_seqs) * T * T * a.n_heads * (a.qk_dim + a.v_dim);
  run_tasks(int64_t(a.n_seqs) * a.n_kv_heads, [&](int64_t task, int) {
    thread_local Blocked b;
    b.kt.resize(size_t(a.qk_dim) * tp), b.vt.resize(size_t(a.v_dim) * tp);
    b.s.resize(size_t(R) * tp), b.dp.resize(size_t(R) * tp);
    b.spill.resize(size_t(R) * a.qk_dim);
    {
      const int s = int(task / a.n_kv_heads), kvh = int(task % a.n_kv_heads);
      const int64_t r0 = int64_t(s) * T;
      const float* k0 = a.k + r0 * a.k_stride + int64_t(kvh) * a.qk_dim;
      const float* v0 = a.v + r0 * a.v_stride + int64_t(kvh) * a.v_dim;
      b.dk.assign(size_t(T) * a.qk_dim, 0.0f), b.dv.assign(size_t(T) * a.v_dim, 0.0f);
      float *dk0 = b.dk.data(), *dv0 = b.dv.data();
      transpose_rows(k0, a.k_stride, T, a.qk_dim, b.kt.data(), tp);
      transpose_rows(v0, a.v_stride, T, a.v_dim, b.vt.data(), tp);
      for (int h = kvh * group; h < (kvh + 1) * group; ++h)
        for (int i0 = 0; i0 < T; i0 += R) {
          const int rows = std::min(R, T - i0), nk = i0 + rows, nk16 = (nk + 15) / 16 * 16;
          const float *q[R], *dout[R];
          float* dq[R];
          for (int r = 0; r < R; ++r) {
            const int64_t row = r0 + i0 + std::min(r, rows - 1);
            q[r] = a.q + row * a.q_stride + int64_t(h) * a.qk_dim;
            dout[r] = a.dout + row * a.dout_stride + int64_t(h) * a.v_dim;
            dq[r] = r < rows ? a.dq + row * a.q_stride + int64_t(h) * a.qk_dim : b.spill.data() + r * a.qk_dim;
          }
          scores(q, b.kt.data(), tp, a.qk_dim, nk16, a.scale, b.s.data(), tp);
          scores(dout, b.vt.data(), tp, a.v_dim, nk16, 1.0f, b.dp.data(), tp);
          for (int r = 0; r < R; ++r) {
            float* p = b.s.data() + r * tp;
            float* ds = b.dp.data() + r * tp;
            if (r >= rows) {
              std::fill(p, p + nk, 0.0f), std::fill(ds, ds + nk, 0.0f);
              continue;
            }
            const int64_t row = r0 + i0 + r;
            const int n = i0 + r + 1;
            exp_shift(p, n, a.lse[row * a.n_heads + h]);
            std::fill(p + n, p + nk, 0.0f);
            const float di = dot(dout[r], a.out + row * a.out_stride + int64_t(h) * a.v_dim, a.v_dim);
            const __m256 dv8 = _mm256_set1_ps(di), sc = _mm256_set1_ps(a.scale);
            int j = 0;
            for (; j + 8 <= nk; j += 8)
              _mm256_storeu_ps(ds + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(p + j), sc),
                                                     _mm256_sub_ps(_mm256_loadu_ps(ds + j), dv8)));
            for (; j < nk; ++j) ds[j] = p[j] * a.scale * (ds[j] - di);
          }
          mix(b.dp.data(), tp, k0, a.k_stride, nk, a.qk_dim, dq);                  // dQ = dS K
          scatter(b.dp.data(), tp, q, rows, nk, a.qk_dim, dk0, a.qk_dim);  // dK += dS^T Q
          scatter(b.s.data(), tp, dout, rows, nk, a.v_dim, dv0, a.v_dim);   // dV += P^T dO
        }
      for (int j = 0; j < T; ++j) {
        std::copy_n(dk0 + size_t(j) * a.qk_dim, a.qk_dim, a.dk + (r0 + j) * a.k_stride + int64_t(kvh) * a.qk_dim);
        std::copy_n(dv0 + size_t(j) * a.v_dim, a.v_dim, a.dv + (r0 + j) * a.v_stride + int64_t(kvh) * a.v_dim);
      }
    }
  }, work < 1e5);
}

}  // namespace

void attention_train_forward_avx2(const AttentionTrainArgs& a) {
  if (blockable(a)) forward_blocked(a);
  else forward_rows(a);
}

void attention_train_backward_avx2(const AttentionTrainArgs& a) {
  if (blockable(a)) backward_blocked(a);
  else backward_rows(a);
}

}  // namespace mtb::kernels
