// AVX2+FMA matrix products y = x · W^T. Compiled with -mavx2 -mfma -mf16c; only called
// when the CPU has them (see cpu.h). Decode-sized products (few rows of x): threads split the
// rows of W (of all the jobs of one call); weights are read in their stored type (F32, BF16,
// F16, Q8_0) and widened to float in registers, never converted up front, so decoding streams
// each weight byte once. Prefill-sized products go to the packed GEMM of matmul_grad.h.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/matmul.h"
#include "mtb/kernels/matmul_grad.h"
#include "mtb/kernels/tasks.h"

namespace mtb::kernels {
namespace {

// Eight consecutive weights as floats (plain types).
using avx2::load1;
using avx2::load8;

using avx2::hsum;

// y[m0..m0+MR) x [n0..n0+NR): MR rows of x (ldx apart) against NR rows of W; y rows ldy apart.
template <DType T, int MR, int NR>
inline void tile(float* y, int64_t ldy, const float* x, int64_t ldx, const void* w, const float* bias, int m0, int n0, int K) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  const size_t row_bytes = dtype_bytes(T, K);
  const uint8_t* wr[NR];
  for (int j = 0; j < NR; ++j) wr[j] = static_cast<const uint8_t*>(w) + size_t(n0 + j) * row_bytes;
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = x + (m0 + i) * ldx;
  int k = 0;
  if constexpr (T == DType::Q8_0) {
    // One block of 32 per step: scale the int8 weights by the block's fp16 scale, 8 at a time.
    for (int b = 0; k < K; ++b, k += kQ8Block) {
      __m256 d[NR];
      for (int j = 0; j < NR; ++j) {
        uint16_t h;
        std::memcpy(&h, wr[j] + size_t(b) * kQ8BlockBytes, 2);
        d[j] = _mm256_set1_ps(f16_to_f32(h));
      }
      for (int s = 0; s < 4; ++s) {
        __m256 wv[NR];
        for (int j = 0; j < NR; ++j) {
          const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr[j] + size_t(b) * kQ8BlockBytes + 2 + s * 8));
          wv[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d[j]);
        }
        for (int i = 0; i < MR; ++i) {
          const __m256 xv = _mm256_loadu_ps(xr[i] + k + s * 8);
          for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) y[(m0 + i) * ldy + n0 + j] = hsum(acc[i][j]) + (bias ? bias[n0 + j] : 0.0f);
  } else {
    for (; k + 8 <= K; k += 8) {
      __m256 wv[NR];
      for (int j = 0; j < NR; ++j) wv[j] = load8<T>(wr[j], k);
      for (int i = 0; i < MR; ++i) {
        const __m256 xv = _mm256_loadu_ps(xr[i] + k);
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        float s = hsum(acc[i][j]);
        for (int kk = k; kk < K; ++kk) s += xr[i][kk] * load1<T>(wr[j], kk);
        y[(m0 + i) * ldy + n0 + j] = s + (bias ? bias[n0 + j] : 0.0f);
      }
  }
}

// Rows [n0, n1) of W against MR rows of x, NR rows of W at a time.
template <DType T, int MR, int NR>
inline void rows(const MatmulJob& j, int m0, int n0, int n1) {
  int n = n0;
  for (; n + NR <= n1; n += NR) tile<T, MR, NR>(j.y, j.ldy, j.x, j.ldx, j.w, j.bias, m0, n, j.K);
  for (; n < n1; ++n) tile<T, MR, 1>(j.y, j.ldy, j.x, j.ldx, j.w, j.bias, m0, n, j.K);
}

// Rows [n0, n1) of a job's W against all its rows of x: 4 rows of x meet 2 rows of W (8
// accumulators), and the last 1-3 rows of x (all of decoding) meet 4 rows of W at a time.
template <DType T>
void block(const MatmulJob& j, int n0, int n1) {
  int m = 0;
  for (; m + 4 <= j.M; m += 4) rows<T, 4, 2>(j, m, n0, n1);
  for (; m < j.M; ++m) rows<T, 1, 4>(j, m, n0, n1);
}

void block(const MatmulJob& j, int n0, int n1) {
  switch (j.wtype) {
    case DType::F32: return block<DType::F32>(j, n0, n1);
    case DType::BF16: return block<DType::BF16>(j, n0, n1);
    case DType::F16: return block<DType::F16>(j, n0, n1);
    case DType::Q8_0: return block<DType::Q8_0>(j, n0, n1);
  }
}

// Rows of x from which a product goes to the packed GEMM (prefill): there each weight is
// reused by many rows, so the FMA units, not the weight stream, set the pace.
constexpr int kGemmRows = 16;

// Prefill: the packed, cache-blocked 6x16 GEMM of matmul_grad.h. F32 weights are packed
// straight from the mapped file; other types are widened to F32 a slab of rows at a time
// (about 4 MiB, in parallel) and the slab multiplied, so the inner kernel is always the F32
// FMA tile, and widening costs one pass over W per call (1/M of the work).
void run_gemm(const MatmulJob& mj) {
  const int M = mj.M, N = mj.N, K = mj.K;
  auto job = [&](const float* w, int n0, int nr) {
    GemmJob j;
    j.M = M, j.N = nr, j.C = mj.y + n0, j.ldc = mj.ldy;
    j.add(GemmTerm{K, MatView{mj.x, mj.ldx, 1}, MatView{w, 1, K}});  // B[k][n] = W[n][k]
    return j;
  };
  if (mj.wtype == DType::F32) {
    const GemmJob j = job(static_cast<const float*>(mj.w), 0, N);
    gemm_jobs_avx2(&j, 1);
  } else {
    thread_local std::vector<float> slab;
    const int rows = std::max(16, int(std::min<int64_t>(N, (int64_t(1) << 20) / std::max(K, 1))) / 16 * 16);
    if (slab.size() < size_t(rows) * size_t(K)) slab.resize(size_t(rows) * size_t(K));
    const size_t row_bytes = dtype_bytes(mj.wtype, K);
    for (int n0 = 0; n0 < N; n0 += rows) {
      const int nr = std::min(rows, N - n0);
      float* s = slab.data();
      parallel_for(nr, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r)
          to_f32(mj.wtype, static_cast<const uint8_t*>(mj.w) + size_t(n0 + r) * row_bytes, s + size_t(r) * K, size_t(K));
      });
      const GemmJob j = job(s, n0, nr);
      gemm_jobs_avx2(&j, 1);
    }
  }
  if (mj.bias)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) mj.y[m * mj.ldy + n] += mj.bias[n];
}

}  // namespace

void matmul_jobs_avx2(const MatmulJob* jobs, int n_jobs) {
  // Decode-sized jobs: blocks of NB rows of W from every job, shared by the threads in one
  // parallel call, so each thread streams its own part of the weights.
  constexpr int NB = 16, kMaxJobs = 64;
  if (n_jobs > kMaxJobs) {  // more than the table holds: in slices
    matmul_jobs_avx2(jobs, kMaxJobs);
    return matmul_jobs_avx2(jobs + kMaxJobs, n_jobs - kMaxJobs);
  }
  const MatmulJob* sj[kMaxJobs];
  int64_t first[kMaxJobs + 1];  // index of each small job's first block
  int small = 0;
  double flops = 0;
  first[0] = 0;
  for (int i = 0; i < n_jobs; ++i) {
    const MatmulJob& j = jobs[i];
    if (j.M <= 0 || j.N <= 0) continue;
    if (j.M >= kGemmRows) {
      run_gemm(j);
      continue;
    }
    sj[small] = &j;
    first[small + 1] = first[small] + (j.N + NB - 1) / NB;
    flops += 2.0 * j.M * j.N * double(j.K);
    ++small;
  }
  if (!small) return;
  // Tasks of 4 blocks (64 rows of W) handed out dynamically (tasks.h): on a shared machine a
  // descheduled thread does not hold the step up; each output still comes from one task.
  constexpr int kBlocksPerTask = 4;
  run_tasks((first[small] + kBlocksPerTask - 1) / kBlocksPerTask, [&](int64_t task, int) {
    const int64_t b0 = task * kBlocksPerTask, b1 = std::min(b0 + kBlocksPerTask, first[small]);
    int q = 0;
    for (int64_t b = b0; b < b1; ++b) {
      while (first[q + 1] <= b) ++q;
      const MatmulJob& j = *sj[q];
      const int n0 = int(b - first[q]) * NB;
      block(j, n0, std::min(n0 + NB, j.N));
    }
  }, flops < 2e5);
}

void matmul_avx2(float* y, const float* x, const void* w, DType wtype, const float* bias, int M, int N, int K) {
  const MatmulJob j{y, N, x, K, w, wtype, bias, M, N, K};
  matmul_jobs_avx2(&j, 1);
}

}  // namespace mtb::kernels
