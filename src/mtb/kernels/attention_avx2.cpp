// AVX2+FMA causal attention, blocked like flash attention: a task takes a few query rows of
// one kv head (all the query heads that share it: "query vectors") and a range of keys, and
// walks the keys in blocks of KB. Per block it computes the scores of every query vector
// (register tiles of 4 query vectors x 2 keys), updates a running softmax (max, sum), and
// adds the block's values to per-vector accumulators (tiles of query vectors x 16..64 value
// dims, the weights broadcast). So K and V are streamed once per task, each key row reused
// from L1/L2 by every query vector of the task, and nothing of size keys x heads is stored.
// When there are few tasks (decoding, and MLA's absorbed form has a single kv head) the keys
// are split between tasks and the partial softmaxes merged after (split-K, "flash decoding"),
// so both threads stream disjoint halves of the cache. Tasks go out dynamically (tasks.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/attention.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/tasks.h"

namespace mtb::kernels {
namespace {

using avx2::exp8;
using avx2::hsum;
using avx2::max_of;
using avx2::load1;
using avx2::load8;

constexpr int KB = 64;  // keys per block

// [s0..s7]: the horizontal sums of v[0..8).
inline __m256 hsum8(const __m256 v[8]) {
  const __m256 a = _mm256_hadd_ps(v[0], v[1]), b = _mm256_hadd_ps(v[2], v[3]);
  const __m256 c = _mm256_hadd_ps(v[4], v[5]), d = _mm256_hadd_ps(v[6], v[7]);
  const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  return _mm256_add_ps(_mm256_permute2f128_ps(ab, cd, 0x20), _mm256_permute2f128_ps(ab, cd, 0x31));
}

// s[g * lds + j] = scale * q[g] · k_j for G query vectors and NK (1 or 2) keys at element
// offsets k0[0..NK) of k, over d dims.
template <DType T, int G, int NK>
inline void score_tile(const float* const* q, const void* k, const int64_t* k0, int d, float scale, float* s, int lds) {
  __m256 acc[G][NK];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < NK; ++j) acc[g][j] = _mm256_setzero_ps();
  int e = 0;
  for (; e + 8 <= d; e += 8) {
    __m256 kv[NK];
    for (int j = 0; j < NK; ++j) kv[j] = load8<T>(k, k0[j] + e);
    for (int g = 0; g < G; ++g) {
      const __m256 qv = _mm256_loadu_ps(q[g] + e);
      for (int j = 0; j < NK; ++j) acc[g][j] = _mm256_fmadd_ps(qv, kv[j], acc[g][j]);
    }
  }
  float r[G][NK];
  if constexpr (G == 4 && NK == 2) {
    const __m256 v[8] = {acc[0][0], acc[0][1], acc[1][0], acc[1][1], acc[2][0], acc[2][1], acc[3][0], acc[3][1]};
    alignas(32) float t[8];
    _mm256_store_ps(t, hsum8(v));
    for (int g = 0; g < 4; ++g) r[g][0] = t[2 * g], r[g][1] = t[2 * g + 1];
  } else {
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < NK; ++j) r[g][j] = hsum(acc[g][j]);
  }
  for (; e < d; ++e)
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < NK; ++j) r[g][j] += q[g][e] * load1<T>(k, k0[j] + e);
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < NK; ++j) s[g * lds + j] = r[g][j] * scale;
}

// o[g][e0 .. e0 + 8·DV) += sum over j < nk of p[g * ldp + j] · v_j[e0 ..], v_j at v0[j].
template <DType T, int G, int DV>
inline void pv_tile(float* const* o, int e0, const float* p, int ldp, const void* v, const int64_t* v0, int nk) {
  __m256 acc[G][DV];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < DV; ++c) acc[g][c] = _mm256_loadu_ps(o[g] + e0 + 8 * c);
  for (int j = 0; j < nk; ++j) {
    __m256 vv[DV];
    for (int c = 0; c < DV; ++c) vv[c] = load8<T>(v, v0[j] + e0 + 8 * c);
    for (int g = 0; g < G; ++g) {
      const __m256 w = _mm256_broadcast_ss(p + g * ldp + j);
      for (int c = 0; c < DV; ++c) acc[g][c] = _mm256_fmadd_ps(w, vv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < DV; ++c) _mm256_storeu_ps(o[g] + e0 + 8 * c, acc[g][c]);
}

// All value dims of G query vectors: wide tiles, then 8 at a time, then single elements.
template <DType T, int G>
inline void pv_rows(float* const* o, int dv, const float* p, int ldp, const void* v, const int64_t* v0, int nk) {
  constexpr int DV = 8 / G > 4 ? 4 : 8 / G;  // G x DV accumulators: 8 (G = 1, 2, 4) or 6 (G = 3)
  int e = 0;
  for (; e + 8 * DV <= dv; e += 8 * DV) pv_tile<T, G, DV>(o, e, p, ldp, v, v0, nk);
  for (; e + 8 <= dv; e += 8) pv_tile<T, G, 1>(o, e, p, ldp, v, v0, nk);
  for (; e < dv; ++e)
    for (int g = 0; g < G; ++g) {
      float s = o[g][e];
      for (int j = 0; j < nk; ++j) s += p[g * ldp + j] * load1<T>(v, v0[j] + e);
      o[g][e] = s;
    }
}

// One task's query vectors: where each reads q, how many keys it sees, where its output goes.
struct Task {
  int nq = 0;
  const float* q[64];
  int limit[64];  // keys visible: 0 .. limit-1
  float* o[64];   // unnormalized accumulators [v_dim]
  float m[64], l[64];  // running max and sum of the softmax
};

struct Scratch {
  std::vector<float> s, o;
};

// Keys [j0, j1) for the query vectors of `t`: running softmax state in t.m, t.l, t.o.
template <DType T>
void attend(const AttentionArgs& a, int kvh, int j0, int j1, Task& t, float* s) {
  int64_t k0[KB], v0[KB];
  for (int b0 = j0; b0 < j1; b0 += KB) {
    const int nk = std::min(KB, j1 - b0);
    for (int j = 0; j < nk; ++j) {
      k0[j] = int64_t(b0 + j) * a.k_stride + int64_t(kvh) * a.qk_dim;
      v0[j] = int64_t(b0 + j) * a.v_stride + int64_t(kvh) * a.v_dim;
    }
    // Scores [nq][KB].
    int g = 0;
    for (; g + 4 <= t.nq; g += 4) {
      int j = 0;
      for (; j + 2 <= nk; j += 2) score_tile<T, 4, 2>(t.q + g, a.k, k0 + j, a.qk_dim, a.scale, s + g * KB + j, KB);
      if (j < nk) score_tile<T, 4, 1>(t.q + g, a.k, k0 + j, a.qk_dim, a.scale, s + g * KB + j, KB);
    }
    for (; g < t.nq; ++g) {
      int j = 0;
      for (; j + 4 <= nk; j += 4) score_tile<T, 1, 4>(t.q + g, a.k, k0 + j, a.qk_dim, a.scale, s + g * KB + j, KB);
      for (; j < nk; ++j) score_tile<T, 1, 1>(t.q + g, a.k, k0 + j, a.qk_dim, a.scale, s + g * KB + j, KB);
    }
    // Running softmax: masked keys weigh 0; the accumulators rescale when the max grows.
    for (g = 0; g < t.nq; ++g) {
      float* sg = s + g * KB;
      const int valid = std::clamp(t.limit[g] - b0, 0, nk);
      if (valid == 0) {
        std::fill(sg, sg + nk, 0.0f);
        continue;
      }
      const float m = std::max(t.m[g], max_of(sg, valid));
      const float c = std::exp(t.m[g] - m);  // 0 on the first block (m = -inf)
      const __m256 mb = _mm256_set1_ps(m);
      __m256 sv = _mm256_setzero_ps();
      int j = 0;
      for (; j + 8 <= valid; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + j), mb));
        _mm256_storeu_ps(sg + j, e);
        sv = _mm256_add_ps(sv, e);
      }
      float sum = hsum(sv);
      for (; j < valid; ++j) sum += sg[j] = std::exp(sg[j] - m);
      std::fill(sg + valid, sg + nk, 0.0f);
      if (c != 1.0f) {
        const __m256 cv = _mm256_set1_ps(c);
        float* o = t.o[g];
        int e = 0;
        for (; e + 8 <= a.v_dim; e += 8) _mm256_storeu_ps(o + e, _mm256_mul_ps(cv, _mm256_loadu_ps(o + e)));
        for (; e < a.v_dim; ++e) o[e] *= c;
      }
      t.l[g] = t.l[g] * c + sum, t.m[g] = m;
    }
    // Values.
    for (g = 0; g + 4 <= t.nq; g += 4) pv_rows<T, 4>(t.o + g, a.v_dim, s + g * KB, KB, a.v, v0, nk);
    if (t.nq - g == 3) pv_rows<T, 3>(t.o + g, a.v_dim, s + g * KB, KB, a.v, v0, nk);
    else if (t.nq - g == 2) pv_rows<T, 2>(t.o + g, a.v_dim, s + g * KB, KB, a.v, v0, nk);
    else if (t.nq - g == 1) pv_rows<T, 1>(t.o + g, a.v_dim, s + g * KB, KB, a.v, v0, nk);
  }
}

template <DType T>
void run(const AttentionArgs& a) {
  const int group = a.n_heads / a.n_kv_heads;
  // A task's query vectors: `rows` query rows x `hpt` heads of one kv head (at most 64, and
  // enough rows to give the score tiles 4+ vectors).
  const int hpt = std::min(group, 64), head_slices = (group + hpt - 1) / hpt;
  const int rows = std::max(1, std::min(a.n_queries, std::min(64 / hpt, (8 + hpt - 1) / hpt)));
  const int row_blocks = (a.n_queries + rows - 1) / rows;
  const int max_keys = a.q_pos0 + a.n_queries;
  const int64_t base_tasks = int64_t(row_blocks) * a.n_kv_heads * head_slices;
  // Split the keys when tasks are few (under 8), keeping >= 256 keys per split. A fixed
  // number, not the thread count: results do not depend on the threads.
  constexpr int kMinTasks = 8;
  int splits = 1;
  if (base_tasks < kMinTasks)
    splits = int(std::max<int64_t>(1, std::min<int64_t>((kMinTasks + base_tasks - 1) / base_tasks, max_keys / 256)));
  // Base task bt: rows [i0, i1) and heads [h0, h1). Heavy row blocks (late rows see more
  // keys) alternate with light ones (zigzag), so a contiguous range of tasks is balanced.
  struct Unit {
    int i0, i1, h0, h1;
  };
  auto unit = [&](int64_t bt) {
    const int64_t rb_pos = bt / (int64_t(a.n_kv_heads) * head_slices);
    const int rb = int(rb_pos % 2 == 0 ? row_blocks - 1 - rb_pos / 2 : rb_pos / 2);
    const int kvh = int(bt / head_slices % a.n_kv_heads), hs = int(bt % head_slices);
    Unit u;
    u.i0 = rb * rows, u.i1 = std::min(a.n_queries, u.i0 + rows);
    u.h0 = kvh * group + hs * hpt, u.h1 = std::min(u.h0 + hpt, (kvh + 1) * group);
    return u;
  };
  // Partial results of split tasks: per task and query vector, [m, l, o[v_dim]].
  const int64_t part = 2 + a.v_dim, vecs = int64_t(rows) * hpt;
  thread_local std::vector<float> parts;
  if (splits > 1 && parts.size() < size_t(base_tasks * splits * vecs * part)) parts.resize(size_t(base_tasks * splits * vecs * part));
  float* parts_p = parts.data();
  const double work = double(a.n_queries) * max_keys * a.n_heads * (a.qk_dim + a.v_dim);
  run_tasks(base_tasks * splits, [&](int64_t task, int) {
    thread_local Scratch sc;
    const int64_t bt = task / splits;
    const int split = int(task % splits);
    const Unit u = unit(bt);
    const int kvh = u.h0 / group;
    Task t;
    t.nq = (u.i1 - u.i0) * (u.h1 - u.h0);
    if (sc.o.size() < size_t(t.nq) * size_t(a.v_dim)) sc.o.resize(size_t(t.nq) * size_t(a.v_dim));
    if (sc.s.size() < size_t(t.nq) * KB) sc.s.resize(size_t(t.nq) * KB);
    int q = 0;
    for (int i = u.i0; i < u.i1; ++i)
      for (int h = u.h0; h < u.h1; ++h, ++q) {
        t.q[q] = a.q + i * a.q_stride + int64_t(h) * a.qk_dim;
        t.limit[q] = a.q_pos0 + i + 1;
        t.o[q] = splits > 1 ? parts_p + (task * vecs + q) * part + 2 : sc.o.data() + size_t(q) * a.v_dim;
        t.m[q] = -INFINITY, t.l[q] = 0.0f;
        std::fill(t.o[q], t.o[q] + a.v_dim, 0.0f);
      }
    const int keys = a.q_pos0 + u.i1;  // the last row sees the most
    const int j0 = int(int64_t(keys) * split / splits), j1 = int(int64_t(keys) * (split + 1) / splits);
    attend<T>(a, kvh, j0, j1, t, sc.s.data());
    q = 0;
    for (int i = u.i0; i < u.i1; ++i)
      for (int h = u.h0; h < u.h1; ++h, ++q) {
        if (splits > 1) {
          t.o[q][-2] = t.m[q], t.o[q][-1] = t.l[q];
          continue;
        }
        float* out = a.out + i * a.out_stride + int64_t(h) * a.v_dim;
        const float inv = 1.0f / t.l[q];
        for (int e = 0; e < a.v_dim; ++e) out[e] = t.o[q][e] * inv;
      }
  }, work < 1e5);
  if (splits == 1) return;
  // Merge the splits: out = sum_s e^(m_s - m) o_s / sum_s e^(m_s - m) l_s.
  for (int64_t bt = 0; bt < base_tasks; ++bt) {
    const Unit u = unit(bt);
    int q = 0;
    for (int i = u.i0; i < u.i1; ++i)
      for (int h = u.h0; h < u.h1; ++h, ++q) {
        float m = -INFINITY;
        for (int sp = 0; sp < splits; ++sp) m = std::max(m, parts_p[((bt * splits + sp) * vecs + q) * part]);
        float* out = a.out + i * a.out_stride + int64_t(h) * a.v_dim;
        std::fill(out, out + a.v_dim, 0.0f);
        float l = 0.0f;
        for (int sp = 0; sp < splits; ++sp) {
          const float* pr = parts_p + ((bt * splits + sp) * vecs + q) * part;
          if (pr[1] == 0.0f) continue;  // a split with no visible keys
          const float c = std::exp(pr[0] - m);
          l += c * pr[1];
          for (int e = 0; e < a.v_dim; ++e) out[e] += c * pr[2 + e];
        }
        const float inv = 1.0f / l;
        for (int e = 0; e < a.v_dim; ++e) out[e] *= inv;
      }
  }
}

}  // namespace

void attention_avx2(const AttentionArgs& a) {
  switch (a.kv_type) {
    case DType::F32: run<DType::F32>(a); return;
    case DType::BF16: run<DType::BF16>(a); return;
    case DType::F16: run<DType::F16>(a); return;
    case DType::Q8_0: break;  // never a KV cache type
  }
}

}  // namespace mtb::kernels
