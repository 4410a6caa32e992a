// AVX2+FMA GEMM (training, and inference's prefill): C (+)= A·B over strided views. Compiled
// with -mavx2 -mfma; only called when the CPU has them (see cpu.h). Blocked in the usual way:
// the inner dimension in KC-slices, A packed in panels of MR rows (all of it once per call,
// shared by the tasks), B in panels of NR columns per task (zero-padded; operands contiguous
// in k are transposed 8 x 8 in registers; 16-bit B widened on the way), then a 6x16 register
// tile runs over the panels; on CPUs with AVX-512F full 12 x 32 and 6 x 32 tiles run in
// 512-bit registers (functions compiled for it, same arithmetic per element). Tasks (a column
// tile x a group of row blocks) go to the pool's threads; each C element belongs to one task
// and is summed in a fixed order, so results do not depend on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/matmul_grad.h"
#include "mtb/kernels/tasks.h"

namespace mtb::kernels {
namespace {

using avx2::load1;
using avx2::load8;
using avx2::transpose8;

constexpr int MR = 6, NR = 16;
constexpr int KC = kGemmKC, MC = 96, NC = 256;  // MC % MR == 0, NC % NR == 0

// Rows [i0, i0+m) x inner [k0, k0+kc) of A as panels of MR rows: dst[panel][k][r] (rows
// past m zero). Writes exactly the panels' floats, so blocks can be packed side by side in
// parallel.
void pack_a(const MatView& A, int i0, int m, int k0, int kc, float* dst) {
  const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
  for (int p = 0; p < m; p += MR) {
    const int rows = std::min(MR, m - p);
    const float* base = A.p + int64_t(i0 + p) * A.rs + int64_t(k0) * A.cs;
    int k = 0;
    if (A.cs == 1 && rows == MR) {
      // Rows contiguous in k: transpose 8 k at a time; each k's 6 values are stored 8 wide,
      // the 2 extra lanes overwritten by the next k (the panel's last k stores 6).
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < MR; ++i) r[i] = _mm256_loadu_ps(base + int64_t(i) * A.rs + k);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        for (int j = 0; j < 8; ++j)
          if (k + j + 1 < kc) _mm256_storeu_ps(dst + (k + j) * MR, r[j]);
          else _mm256_maskstore_ps(dst + (k + j) * MR, six, r[j]);
      }
    }
    for (; k < kc; ++k) {
      for (int r = 0; r < rows; ++r) dst[k * MR + r] = base[int64_t(r) * A.rs + int64_t(k) * A.cs];
      for (int r = rows; r < MR; ++r) dst[k * MR + r] = 0.0f;
    }
    dst += MR * kc;
  }
}

// Inner [k0, k0+kc) x columns [j0, j0+n) of B as panels of NR columns: dst[panel][k][c],
// B's elements of type T widened to float.
template <DType T>
void pack_b(const MatView& B, int k0, int kc, int j0, int n, float* dst) {
  const void* p = B.p;  // elements of type T
  for (int q = 0; q < n; q += NR) {
    const int cols = std::min(NR, n - q);
    const int64_t base = int64_t(k0) * B.rs + int64_t(j0 + q) * B.cs;  // element index
    if (B.cs == 1) {
      for (int k = 0; k < kc; ++k) {
        const int64_t src = base + int64_t(k) * B.rs;
        float* d = dst + k * NR;
        if (cols == NR) {
          _mm256_storeu_ps(d, load8<T>(p, src));
          _mm256_storeu_ps(d + 8, load8<T>(p, src + 8));
          continue;
        }
        for (int c = 0; c < cols; ++c) d[c] = load1<T>(p, src + c);
        for (int c = cols; c < NR; ++c) d[c] = 0.0f;
      }
    } else {
      for (int c0 = 0; c0 < NR; c0 += 8) {
        int k = 0;
        if (B.rs == 1 && c0 + 8 <= cols) {  // columns contiguous in k (B = W^T): transpose 8 x 8
          for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            for (int c = 0; c < 8; ++c) r[c] = load8<T>(p, base + int64_t(c0 + c) * B.cs + k);
            transpose8(r);
            for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (k + j) * NR + c0, r[j]);
          }
        }
        for (; k < kc; ++k)
          for (int c = c0; c < c0 + 8; ++c)
            dst[k * NR + c] = c < cols ? load1<T>(p, base + int64_t(c) * B.cs + int64_t(k) * B.rs) : 0.0f;
      }
    }
    dst += NR * kc;
  }
}

void pack_b(const GemmTerm& term, int k0, int kc, int j0, int n, float* dst) {
  switch (term.b_type) {
    case DType::BF16: return pack_b<DType::BF16>(term.B, k0, kc, j0, n, dst);
    case DType::F16: return pack_b<DType::F16>(term.B, k0, kc, j0, n, dst);
    default: return pack_b<DType::F32>(term.B, k0, kc, j0, n, dst);
  }
}

// C[0..mr) x [0..nr) (+)= a-panel · b-panel over kc steps.
inline void micro(int kc, const float* a, const float* b, float* c, int64_t ldc, int mr, int nr, bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
         c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
         c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
         c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int r = 0; r < mr; ++r) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);  // as in micro512
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 av = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(av, b0, c00), c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10), c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20), c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30), c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40), c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50), c51 = _mm256_fmadd_ps(av, b1, c51);
    a += MR, b += NR;
  }
  const __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (mr == MR && nr == NR) {
    for (int r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      __m256 v0 = acc[r][0], v1 = acc[r][1];
      if (add) v0 = _mm256_add_ps(_mm256_loadu_ps(cr), v0), v1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), v1);
      _mm256_storeu_ps(cr, v0);
      _mm256_storeu_ps(cr + 8, v1);
    }
    return;
  }
  alignas(32) float tmp[MR][NR];
  for (int r = 0; r < MR; ++r) _mm256_store_ps(tmp[r], acc[r][0]), _mm256_store_ps(tmp[r] + 8, acc[r][1]);
  for (int r = 0; r < mr; ++r) {
    float* cr = c + r * ldc;
    for (int j = 0; j < nr; ++j) cr[j] = add ? cr[j] + tmp[r][j] : tmp[r][j];
  }
}

}  // namespace

void gemm_micro_avx2(int kc, const float* a, const float* b, float* c, int64_t ldc, int mr, int nr, bool add) {
  micro(kc, a, b, c, ldc, mr, nr, add);
}

namespace {

// The same product for a 6 x 32 tile (two adjacent B panels) in 512-bit registers, on CPUs
// with AVX-512F. Each lane performs the same fused multiply-adds in the same order as
// micro(), so the results are bit-identical to the 256-bit path.
// P = 2 runs two consecutive A panels at once (a 12 x 32 tile, 24 of AVX-512's 32 registers):
// each B load then serves 12 rows (+2-3% on prefill-sized products). Only the first `rows`
// rows of C are written (a last, partial A panel: its missing rows are zeros).
template <int P>
__attribute__((target("avx512f"))) void micro512(int kc, const float* a, const float* b0, const float* b1, float* c,
                                                 int64_t ldc, bool add, int rows = P * MR) {
  __m512 acc[P * MR][2];
  for (int r = 0; r < P * MR; ++r) {
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    // C's lines are far (L3: C is read and written once per KC-slice); fetch them while the
    // tile computes.
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
  }
  const float* a1 = a + size_t(MR) * kc;
  for (int k = 0; k < kc; ++k) {
    const __m512 v0 = _mm512_loadu_ps(b0 + k * NR), v1 = _mm512_loadu_ps(b1 + k * NR);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[k * MR + r]);
      acc[r][0] = _mm512_fmadd_ps(av, v0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, v1, acc[r][1]);
    }
    if constexpr (P == 2)
      for (int r = 0; r < MR; ++r) {
        const __m512 av = _mm512_set1_ps(a1[k * MR + r]);
        acc[MR + r][0] = _mm512_fmadd_ps(av, v0, acc[MR + r][0]);
        acc[MR + r][1] = _mm512_fmadd_ps(av, v1, acc[MR + r][1]);
      }
  }
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    __m512 x0 = acc[r][0], x1 = acc[r][1];
    if (add) x0 = _mm512_add_ps(_mm512_loadu_ps(cr), x0), x1 = _mm512_add_ps(_mm512_loadu_ps(cr + 16), x1);
    _mm512_storeu_ps(cr, x0);
    _mm512_storeu_ps(cr + 16, x1);
  }
}

// AVX-512 as every core since Skylake-SP has it (F, BW, DQ, VL): the 512-bit decode and
// attention code is compiled for BW/DQ/VL too, so F alone (Xeon Phi) keeps to 256 bits.
bool avx512_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                         !std::getenv("MTB_NO_AVX512");
  return ok;
}
std::atomic<bool> g_avx512{true};


}  // namespace

void gemm_jobs_avx2(const GemmJob* jobs, int n_jobs) {
  // Two parallel phases. First every term's A is packed once, whole (panels of MR rows per
  // KC-slice of the inner dimension), shared by all tasks (and by the jobs with the same A). Then the tasks: a column tile of
  // a job's C (NC wide) x a group of its row blocks (MC high); each KC-slice of B is packed
  // once per task and reused by every row block of the group; groups give about 4 tasks per
  // thread per job. Tasks of all jobs go out dynamically (tasks.h).
  struct Tiling {
    int tiles_n = 0, groups_m = 0, group_rows = 0;
    int64_t first = 0;                 // index of the job's first task
    int64_t a_at[GemmJob::kMaxTerms];  // where each term's packed A starts in `packed`
  };
  constexpr int kMaxJobs = 16;
  if (n_jobs > kMaxJobs) {  // more jobs than the tiling table holds: run them in slices
    gemm_jobs_avx2(jobs, kMaxJobs);
    gemm_jobs_avx2(jobs + kMaxJobs, n_jobs - kMaxJobs);
    return;
  }
  Tiling tiling[kMaxJobs];
  int64_t tasks = 0, packed_floats = 0;
  double flops = 0;
  struct PackUnit {
    int job, term, k0, i0;
  };
  thread_local std::vector<PackUnit> units;  // (reused: no allocation per call once grown)
  units.clear();
  for (int q = 0; q < n_jobs; ++q) {
    const GemmJob& job = jobs[q];
    Tiling& t = tiling[q];
    t.first = tasks;
    if (job.M <= 0 || job.N <= 0) continue;
    const int blocks_m = (job.M + MC - 1) / MC;
    t.tiles_n = (job.N + NC - 1) / NC;
    t.groups_m = std::clamp((4 * num_threads() + t.tiles_n - 1) / t.tiles_n, 1, blocks_m);
    t.group_rows = (blocks_m + t.groups_m - 1) / t.groups_m * MC;
    tasks += int64_t(t.tiles_n) * t.groups_m;
    const int64_t rows_padded = (job.M + MR - 1) / MR * MR;
    for (int k = 0; k < job.n_terms; ++k) {
      const GemmTerm& term = job.terms[k];
      flops += 2.0 * job.M * job.N * double(term.K);
      // An A that an earlier job of the call packed already (q, k and v share theirs) is
      // used from there.
      t.a_at[k] = -1;
      for (int q2 = 0; q2 < q && t.a_at[k] < 0; ++q2)
        for (int k2 = 0; k2 < jobs[q2].n_terms; ++k2) {
          const GemmTerm& o = jobs[q2].terms[k2];
          if (jobs[q2].M == job.M && jobs[q2].N > 0 && o.K == term.K && o.A.p == term.A.p && o.A.rs == term.A.rs && o.A.cs == term.A.cs) {
            t.a_at[k] = tiling[q2].a_at[k2];
            break;
          }
        }
      if (t.a_at[k] >= 0) continue;
      t.a_at[k] = packed_floats;
      packed_floats += rows_padded * term.K;
      for (int k0 = 0; k0 < term.K; k0 += KC)
        for (int i0 = 0; i0 < job.M; i0 += MC) units.push_back({q, k, k0, i0});
    }
  }
  // Term k's A, slice k0, rows from i0 (a multiple of MR) packed at a_at[k] + rows_padded·k0
  // + i0·kc: each slice holds rows_padded x kc floats, and every slice before it is KC deep.
  auto packed_a = [&](float* packed, int q, int k, int k0, int i0) {
    const int64_t rows_padded = (jobs[q].M + MR - 1) / MR * MR;
    const int kc = std::min(KC, jobs[q].terms[k].K - k0);
    return packed + tiling[q].a_at[k] + rows_padded * k0 + int64_t(i0) * kc;
  };
  thread_local std::vector<float> packed_buf;
  if (packed_buf.size() < size_t(packed_floats)) packed_buf.resize(size_t(packed_floats));
  float* packed = packed_buf.data();  // (the workers' own thread_local packed_buf is another vector)
  const bool serial = flops < 1e5;
  const PackUnit* units_p = units.data();  // (a worker's own thread_local units is another vector)
  run_tasks(int64_t(units.size()), [&](int64_t u, int) {
    const PackUnit& pu = units_p[u];
    const GemmJob& job = jobs[pu.job];
    const GemmTerm& term = job.terms[pu.term];
    pack_a(term.A, pu.i0, std::min(MC, job.M - pu.i0), pu.k0, std::min(KC, term.K - pu.k0),
           packed_a(packed, pu.job, pu.term, pu.k0, pu.i0));
  }, serial);
  const bool wide = gemm_avx512();
  run_tasks(tasks, [&](int64_t task, int) {
    thread_local std::vector<float> buf_b;
    if (buf_b.size() < size_t(NC) * KC) buf_b.resize(size_t(NC) * KC);
    float* const bp0 = buf_b.data();
    int q = 0;
    while (q + 1 < n_jobs && tiling[q + 1].first <= task) ++q;
    const GemmJob& job = jobs[q];
    const Tiling& tl = tiling[q];
    const int64_t t = task - tl.first;
    const int j0 = int(t / tl.groups_m) * NC, n = std::min(NC, job.N - j0);
    const int g0 = int(t % tl.groups_m) * tl.group_rows, g1 = std::min(job.M, g0 + tl.group_rows);
    bool add = job.accumulate;
    for (int k = 0; k < job.n_terms; ++k) {
      const GemmTerm& term = job.terms[k];
      for (int k0 = 0; k0 < term.K; k0 += KC) {
        const int kc = std::min(KC, term.K - k0);
        pack_b(term, k0, kc, j0, n, bp0);
        for (int i0 = g0; i0 < g1; i0 += MC) {
          const int m = std::min(MC, g1 - i0);
          const float* a0 = packed_a(packed, q, k, k0, i0);
          int jr = 0;
          if (wide)  // pairs of full B panels in 512-bit registers, 12 rows at a time (fewer: last)
            for (; jr + 2 * NR <= n; jr += 2 * NR)
              for (int ir = 0; ir < m; ir += MR) {
                const float* ap = a0 + size_t(ir) * kc;
                float* cp = job.C + (i0 + ir) * job.ldc + j0 + jr;
                const float* bp = bp0 + size_t(jr) * kc;
                if (m - ir > MR) {  // two panels (the second perhaps partial)
                  micro512<2>(kc, ap, bp, bp + size_t(NR) * kc, cp, job.ldc, add, std::min(2 * MR, m - ir));
                  ir += MR;
                } else {
                  micro512<1>(kc, ap, bp, bp + size_t(NR) * kc, cp, job.ldc, add, std::min(MR, m - ir));
                }
              }
          for (; jr < n; jr += NR)
            for (int ir = 0; ir < m; ir += MR)
              micro(kc, a0 + size_t(ir) * kc, bp0 + size_t(jr) * kc, job.C + (i0 + ir) * job.ldc + j0 + jr, job.ldc,
                    std::min(MR, m - ir), std::min(NR, n - jr), add);
        }
        add = true;
      }
    }
    if (!add)  // no inner dimension at all: C = 0
      for (int i = g0; i < g1; ++i) std::fill(job.C + i * job.ldc + j0, job.C + i * job.ldc + j0 + n, 0.0f);
  }, serial);
}

bool gemm_avx512() { return avx512_supported() && g_avx512.load(std::memory_order_relaxed); }
void gemm_allow_avx512(bool on) { g_avx512.store(on, std::memory_order_relaxed); }

}  // namespace mtb::kernels
