// Prefill-sized products (16+ rows of x) summed in the decode tiles' order, at GEMM speed:
// batch invariance. The 256-bit decode tiles (matmul_avx2.cpp) give each output eight lane
// sums over interleaved parts of k, then one fixed horizontal sum: for F32 and F16 weights,
// lane l adds k = 8j + l for j = 0, 1, ... (whole groups of 8); for BF16 (split into
// even/odd halves) lane l adds k = 16g + 2l, then 16g + 2l + 1, for each whole group of 16;
// then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then the k past the whole groups
// one at a time, then the bias. Here each lane's part of k is one "subset": x and W are
// packed per subset (8 k of 8 rows at a time, transposed in registers: one transpose fills
// all 8 subsets), the GEMM's 6 x 16 register tile sums each subset from zero (the same fused
// multiply-adds in the same order as the lane), and the eight partial tiles are added in the
// horizontal sum's order. So a row of x gets the same bits here as alone in a decode step.
// Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/matmul.h"
#include "mtb/kernels/matmul_grad.h"
#include "mtb/kernels/tasks.h"

namespace mtb::kernels {
namespace {

using avx2::load1;
using avx2::load8;
using avx2::transpose8;

constexpr int L = 8;             // lanes (subsets)
constexpr int MR = 6, NR = 16;   // the GEMM's register tile

// k per whole group: 16 for BF16 (even/odd), else 8; each subset gets group / 8 elements a group.
int group_of(DType t) { return t == DType::BF16 ? 16 : 8; }

// Floats from one subset's panel to the next: D x width, plus a cache line, so that the eight
// stores of a transpose do not all land in the same L1 set (panels of 4 or 8 KiB).
int64_t subset_stride(int D, int width) { return int64_t(D) * width + 16; }

// The eight 8-lane vectors v[0..8) transposed and stored per subset: dst[l * ds + at + c] =
// v[c][l] for c < n (8 columns at `at` of subset l's row).
inline void store_subsets(__m256 v[8], float* dst, int64_t ds, int64_t at, int n) {
  transpose8(v);
  if (n == 8) {
    for (int l = 0; l < L; ++l) _mm256_storeu_ps(dst + l * ds + at, v[l]);
  } else {
    alignas(32) float t[8];
    for (int l = 0; l < L; ++l) {
      _mm256_store_ps(t, v[l]);
      std::copy(t, t + n, dst + l * ds + at);
    }
  }
}

// Eight floats of a row in a group, as one of its halves: for 8-k groups the group itself;
// for BF16's 16-k groups the even (half 0) or odd (half 1) elements. `row` holds floats
// (x) or weights of type T.
template <DType T>
inline __m256 half_of(const void* row, int64_t k0, int half, bool is_x) {
  if (is_x) {
    const float* x = static_cast<const float*>(row) + k0;
    if (T != DType::BF16) return _mm256_loadu_ps(x);
    const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x), idx);      // x0 x2 x4 x6 | x1 x3 x5 x7
    const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + 8), idx);  // x8 .. x14 | x9 .. x15
    return half == 0 ? _mm256_permute2f128_ps(a, b, 0x20) : _mm256_permute2f128_ps(a, b, 0x31);
  }
  if constexpr (T == DType::BF16) {  // as tile_bf16 splits them
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k0));
    return half == 0 ? _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))
                     : _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int32_t(0xffff0000u))));
  } else {
    return load8<T>(row, k0);
  }
}

// Rows r of a matrix (row pointers, null: zero rows), packed per subset: dst[l][i][c]
// (subset l, depth i of D, column c of `width`), for the whole groups of k.
template <DType T>
void pack_subsets(const void* const* rows, int n, int width, int G, int D, bool is_x, float* dst) {
  const int halves = G / 8;
  const int64_t ds = subset_stride(D, width);
  for (int c0 = 0; c0 < n; c0 += 8) {
    const int nc = std::min(8, n - c0);
    for (int g = 0; g * G < D / halves * G; ++g)
      for (int h = 0; h < halves; ++h) {
        __m256 v[8];
        for (int c = 0; c < 8; ++c)
          v[c] = c < nc && rows[c0 + c] ? half_of<T>(rows[c0 + c], int64_t(g) * G, h, is_x) : _mm256_setzero_ps();
        store_subsets(v, dst, ds, int64_t(g * halves + h) * width + c0, nc);
      }
  }
  // Columns of the panel past n are zero.
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < D; ++i)
      for (int c = n; c < width; ++c) dst[l * ds + int64_t(i) * width + c] = 0.0f;
}

template <DType T>
void pack_subsets_t(const void* const* rows, int n, int width, int G, int D, bool is_x, float* dst) {
  pack_subsets<T>(rows, n, width, G, D, is_x, dst);
}

void pack_rows(DType t, const void* const* rows, int n, int width, int D, bool is_x, float* dst) {
  const int G = group_of(t);
  switch (t) {
    case DType::BF16: return pack_subsets_t<DType::BF16>(rows, n, width, G, D, is_x, dst);
    case DType::F16: return pack_subsets_t<DType::F16>(rows, n, width, G, D, is_x, dst);
    default: return pack_subsets_t<DType::F32>(rows, n, width, G, D, is_x, dst);
  }
}

float weight1(DType t, const void* row, int k) {
  switch (t) {
    case DType::BF16: return load1<DType::BF16>(row, k);
    case DType::F16: return load1<DType::F16>(row, k);
    default: return load1<DType::F32>(row, k);
  }
}

}  // namespace

void matmul_lanes_avx2(const MatmulJob* jobs, int n_jobs) {
  constexpr int kMaxJobs = 64;
  if (n_jobs > kMaxJobs) {
    matmul_lanes_avx2(jobs, kMaxJobs);
    return matmul_lanes_avx2(jobs + kMaxJobs, n_jobs - kMaxJobs);
  }
  // x of each job packed once per call (shared by jobs with the same x and order): per panel
  // of 6 rows, L subsets x D x 6 floats.
  struct Plan {
    int D = 0, full = 0, panels = 0, cols = 0, col_groups = 0, row_groups = 0, panels_per_group = 0;
    int64_t a_at = 0, first_task = 0;
  };
  Plan plan[kMaxJobs];
  int64_t a_floats = 0, tasks = 0;
  double flops = 0;
  for (int q = 0; q < n_jobs; ++q) {
    const MatmulJob& j = jobs[q];
    Plan& p = plan[q];
    p.first_task = tasks;
    if (j.M <= 0 || j.N <= 0) continue;
    const int G = group_of(j.wtype);
    p.full = j.K / G * G, p.D = p.full / 8;
    p.panels = (j.M + MR - 1) / MR;
    // Columns per task: its packed W (cols x K floats) should sit in L2 with room to spare.
    p.cols = std::clamp((98304 / std::max(j.K, 1)) / NR * NR, NR, 4 * NR);
    p.col_groups = (j.N + p.cols - 1) / p.cols;
    p.row_groups = std::clamp((4 * num_threads() + p.col_groups - 1) / p.col_groups, 1, p.panels);
    p.panels_per_group = (p.panels + p.row_groups - 1) / p.row_groups;
    p.row_groups = (p.panels + p.panels_per_group - 1) / p.panels_per_group;
    tasks += int64_t(p.col_groups) * p.row_groups;
    flops += 2.0 * j.M * j.N * double(j.K);
    p.a_at = -1;
    for (int q2 = 0; q2 < q && p.a_at < 0; ++q2) {
      const MatmulJob& o = jobs[q2];
      if (o.M > 0 && o.N > 0 && o.x == j.x && o.ldx == j.ldx && o.M == j.M && o.K == j.K &&
          group_of(o.wtype) == G)
        p.a_at = plan[q2].a_at;
    }
    if (p.a_at < 0) p.a_at = a_floats, a_floats += int64_t(p.panels) * L * subset_stride(p.D, MR);
  }
  thread_local std::vector<float> packed_a;
  if (packed_a.size() < size_t(a_floats)) packed_a.resize(size_t(a_floats));
  float* const a_base = packed_a.data();  // (a worker's own thread_local packed_a is another vector)
  // Pack the x panels: one unit per (job that owns its packing, panel).
  int64_t units = 0;
  int64_t unit_first[kMaxJobs + 1];
  bool owns[kMaxJobs];
  for (int q = 0; q < n_jobs; ++q) {
    unit_first[q] = units;
    owns[q] = jobs[q].M > 0 && jobs[q].N > 0;
    for (int q2 = 0; q2 < q && owns[q]; ++q2)
      if (owns[q2] && plan[q2].a_at == plan[q].a_at) owns[q] = false;
    if (owns[q]) units += plan[q].panels;
  }
  unit_first[n_jobs] = units;
  const bool serial = flops < 1e5;
  run_tasks(units, [&](int64_t u, int) {
    int q = 0;
    while (!(owns[q] && unit_first[q] <= u && u < unit_first[q] + plan[q].panels)) ++q;
    const MatmulJob& j = jobs[q];
    const Plan& p = plan[q];
    const int panel = int(u - unit_first[q]);
    const void* rows[8] = {};
    for (int r = 0; r < MR && panel * MR + r < j.M; ++r) rows[r] = j.x + int64_t(panel * MR + r) * j.ldx;
    pack_rows(j.wtype, rows, MR, MR, p.D, true, a_base + p.a_at + int64_t(panel) * L * subset_stride(p.D, MR));
  }, serial);
  run_tasks(tasks, [&](int64_t task, int) {
    int q = 0;
    while (q + 1 < n_jobs && plan[q + 1].first_task <= task) ++q;
    const MatmulJob& j = jobs[q];
    const Plan& p = plan[q];
    const int64_t t = task - p.first_task;
    const int cg = int(t / p.row_groups), rg = int(t % p.row_groups);
    const int n0 = cg * p.cols, n = std::min(p.cols, j.N - n0);
    const int panel0 = rg * p.panels_per_group, panel1 = std::min(p.panels, panel0 + p.panels_per_group);
    // W rows [n0, n0 + n) packed per subset, a panel of 16 columns at a time.
    thread_local std::vector<float> packed_b;
    const int bpanels = (n + NR - 1) / NR;
    const int64_t bp_floats = int64_t(L) * subset_stride(p.D, NR);
    if (packed_b.size() < size_t(bpanels * bp_floats)) packed_b.resize(size_t(bpanels * bp_floats));
    const size_t row_bytes = dtype_bytes(j.wtype, j.K);
    const uint8_t* w = static_cast<const uint8_t*>(j.w);
    for (int b = 0; b < bpanels; ++b) {
      const void* rows[NR] = {};
      for (int c = 0; c < NR && b * NR + c < n; ++c) rows[c] = w + size_t(n0 + b * NR + c) * row_bytes;
      pack_rows(j.wtype, rows, std::min(NR, n - b * NR), NR, p.D, false, packed_b.data() + b * bp_floats);
    }
    alignas(32) float part[L][MR * NR];
    for (int panel = panel0; panel < panel1; ++panel) {
      const float* a = a_base + p.a_at + int64_t(panel) * L * subset_stride(p.D, MR);
      const int m0 = panel * MR, mr = std::min(MR, j.M - m0);
      for (int b = 0; b < bpanels; ++b) {
        const float* bp = packed_b.data() + b * bp_floats;
        for (int l = 0; l < L; ++l) {
          if (p.D > 0)
            gemm_micro_avx2(p.D, a + l * subset_stride(p.D, MR), bp + l * subset_stride(p.D, NR), part[l], NR, MR, NR, false);
          else std::fill(part[l], part[l] + MR * NR, 0.0f);
        }
        const int nb = std::min(NR, n - b * NR);
        for (int r = 0; r < mr; ++r) {
          alignas(32) float s[NR];
          for (int h = 0; h < NR; h += 8) {  // the horizontal sum's order
            auto P = [&](int l) { return _mm256_load_ps(part[l] + r * NR + h); };
            const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(P(0), P(4)), _mm256_add_ps(P(2), P(6))),
                                           _mm256_add_ps(_mm256_add_ps(P(1), P(5)), _mm256_add_ps(P(3), P(7))));
            _mm256_store_ps(s + h, v);
          }
          const float* xr = j.x + int64_t(m0 + r) * j.ldx;
          float* yr = j.y + int64_t(m0 + r) * j.ldy;
          for (int c = 0; c < nb; ++c) {
            const int col = n0 + b * NR + c;
            float v = s[c];
            if (p.full < j.K) {
              const uint8_t* wr = w + size_t(col) * row_bytes;
              for (int k = p.full; k < j.K; ++k) v = std::fma(xr[k], weight1(j.wtype, wr, k), v);
            }
            yr[col] = v + (j.bias ? j.bias[col] : 0.0f);  // (as the tiles add it: -0 becomes +0 alike)
          }
        }
      }
    }
  }, serial);
}

}  // namespace mtb::kernels
