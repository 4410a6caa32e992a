// AVX2+FMA GEMM for training: C (+)= A·B over strided views. Compiled with -mavx2 -mfma;
// only called when the CPU has them (see cpu.h). Blocked in the usual way: for each tile of
// C (MC x NC), each KC-slice of the inner dimension is packed once (A in panels of MR rows,
// B in panels of NR columns, zero-padded), then a 6x16 register tile runs over the panels.
// Tiles are split over the pool's threads; each C element belongs to one tile, so results
// do not depend on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/matmul_grad.h"

namespace mtb::kernels {
namespace {

constexpr int MR = 6, NR = 16;
constexpr int KC = 256, MC = 96, NC = 256;  // MC % MR == 0, NC % NR == 0

// Rows [i0, i0+m) x inner [k0, k0+kc) of A as panels of MR rows: dst[panel][k][r].
void pack_a(const MatView& A, int i0, int m, int k0, int kc, float* dst) {
  for (int p = 0; p < m; p += MR) {
    const int rows = std::min(MR, m - p);
    const float* base = A.p + int64_t(i0 + p) * A.rs + int64_t(k0) * A.cs;
    if (A.cs == 1) {
      for (int r = 0; r < MR; ++r) {
        if (r < rows) {
          const float* src = base + int64_t(r) * A.rs;
          for (int k = 0; k < kc; ++k) dst[k * MR + r] = src[k];
        } else {
          for (int k = 0; k < kc; ++k) dst[k * MR + r] = 0.0f;
        }
      }
    } else {
      for (int k = 0; k < kc; ++k) {
        const float* col = base + int64_t(k) * A.cs;
        for (int r = 0; r < rows; ++r) dst[k * MR + r] = col[int64_t(r) * A.rs];
        for (int r = rows; r < MR; ++r) dst[k * MR + r] = 0.0f;
      }
    }
    dst += MR * kc;
  }
}

// Inner [k0, k0+kc) x columns [j0, j0+n) of B as panels of NR columns: dst[panel][k][c].
void pack_b(const MatView& B, int k0, int kc, int j0, int n, float* dst) {
  for (int q = 0; q < n; q += NR) {
    const int cols = std::min(NR, n - q);
    const float* base = B.p + int64_t(k0) * B.rs + int64_t(j0 + q) * B.cs;
    if (B.cs == 1) {
      for (int k = 0; k < kc; ++k) {
        const float* src = base + int64_t(k) * B.rs;
        float* d = dst + k * NR;
        for (int c = 0; c < cols; ++c) d[c] = src[c];
        for (int c = cols; c < NR; ++c) d[c] = 0.0f;
      }
    } else {
      for (int c = 0; c < NR; ++c) {
        if (c < cols) {
          const float* src = base + int64_t(c) * B.cs;
          for (int k = 0; k < kc; ++k) dst[k * NR + c] = src[int64_t(k) * B.rs];
        } else {
          for (int k = 0; k < kc; ++k) dst[k * NR + c] = 0.0f;
        }
      }
    }
    dst += NR * kc;
  }
}

// C[0..mr) x [0..nr) (+)= a-panel · b-panel over kc steps.
inline void micro(int kc, const float* a, const float* b, float* c, int64_t ldc, int mr, int nr, bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
         c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
         c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
         c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
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

struct Buffers {
  std::vector<float> a, b;
};

}  // namespace

void gemm_avx2(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  const int tiles_m = (M + MC - 1) / MC, tiles_n = (N + NC - 1) / NC;
  const double flops = 2.0 * M * N * double(K);
  parallel_for(int64_t(tiles_m) * tiles_n, [&](int64_t t0, int64_t t1, int) {
    thread_local Buffers buf;
    if (buf.a.size() < size_t(MC) * KC) buf.a.resize(size_t(MC) * KC);
    if (buf.b.size() < size_t(NC) * KC) buf.b.resize(size_t(NC) * KC);
    for (int64_t t = t0; t < t1; ++t) {
      const int i0 = int(t / tiles_n) * MC, j0 = int(t % tiles_n) * NC;
      const int m = std::min(MC, M - i0), n = std::min(NC, N - j0);
      for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = std::min(KC, K - k0);
        pack_b(B, k0, kc, j0, n, buf.b.data());
        pack_a(A, i0, m, k0, kc, buf.a.data());
        const bool add = accumulate || k0 > 0;
        for (int jr = 0; jr < n; jr += NR)
          for (int ir = 0; ir < m; ir += MR)
            micro(kc, buf.a.data() + size_t(ir) * kc, buf.b.data() + size_t(jr) * kc,
                  C + (i0 + ir) * ldc + j0 + jr, ldc, std::min(MR, m - ir), std::min(NR, n - jr), add);
      }
    }
  }, flops < 1e5);
}

}  // namespace mtb::kernels
