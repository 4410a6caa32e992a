// Matrix products for training, all fp32: the forward y = x W^T and the two backward
// products dX = dY W and dW += dY^T X, as one packed, blocked GEMM over strided views
// (so a transposed operand costs nothing but its packing). Several independent products
// (and sums of products into one output) run as one parallel call: fewer waits for threads
// on a busy machine.
#pragma once
#include <cstdint>

#include "mtb/core/dtype.h"

namespace mtb::kernels {

// A matrix operand as a strided view: element (i, j) is p[i * rs + j * cs].
struct MatView {
  const float* p = nullptr;
  int64_t rs = 0, cs = 0;
};

// One product A[M,K] · B[K,N] of a job. B may hold 16-bit elements (BF16 or F16 weights,
// widened to float exactly as they are packed): then B.p is their address, cast, and its
// strides count those elements.
struct GemmTerm {
  int K = 0;
  MatView A, B;
  DType b_type = DType::F32;  // F32, BF16 or F16
};

// C[M,N] (+)= sum over its terms of A·B. C is row-major with row stride ldc; `accumulate`
// adds to C, else C is overwritten (zeros when every K is 0).
struct GemmJob {
  static constexpr int kMaxTerms = 4;
  int M = 0, N = 0;
  float* C = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
  int n_terms = 0;
  GemmTerm terms[kMaxTerms];
  GemmJob& add(const GemmTerm& t);  // throws std::logic_error past kMaxTerms
};

// The GEMM sums the inner dimension in slices of kGemmKC: each C element is the first slice's
// sum, plus the next one's, and so on, each slice summed from zero by fused multiply-adds in
// k order. (kernels/matmul's decode tiles sum in exactly this order: batch invariance.)
constexpr int kGemmKC = 256;

// The 6 x 16 register tile itself (AVX2 only: callers check the CPU): C[0..mr) x [0..nr)
// (+)= a-panel · b-panel over kc steps, panels as the GEMM packs them (a[k·6 + r],
// b[k·16 + c]), each element summed from zero in k order, then added to C when `add`.
void gemm_micro_avx2(int kc, const float* a, const float* b, float* c, int64_t ldc, int mr, int nr, bool add);

// Runs jobs whose outputs do not overlap, all in one parallel call. Terms are summed in
// order, k ascending within a term. Picks the AVX2 kernel (threaded over tiles of every C)
// when available, else gemm_jobs_ref.
void gemm_jobs(const GemmJob* jobs, int n_jobs);
// The scalar twin: plain loops, one thread, float accumulation in order.
void gemm_jobs_ref(const GemmJob* jobs, int n_jobs);
// The AVX2+FMA kernel: 6x16 register tiles over packed panels; tasks (tiles of the outputs)
// handed out to the pool's threads, each output element computed by one task in a fixed order.
void gemm_jobs_avx2(const GemmJob* jobs, int n_jobs);

// The AVX2 kernel runs its full 12 x 32 and 6 x 32 tiles in 512-bit registers when the CPU has
// AVX-512 F/BW/DQ/VL (bit-identical results: the same fused multiply-adds per element, in the
// same order); MTB_NO_AVX512=1 in the environment, or gemm_allow_avx512(false), keeps it at
// 256 bits. The 512-bit decode tiles and attention follow the same switch.
bool gemm_avx512();
void gemm_allow_avx512(bool on);

// One product: C[M,N] (+)= A[M,K] · B[K,N] (a job of one term), and its twins.
void gemm(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate);
void gemm_ref(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate);
void gemm_avx2(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate);

// The three products of a linear layer y = x W^T + b, W [N, K] row-major, x [M, K], as jobs
// and terms, and as single calls:
// y[M,N] = x · W^T.
GemmJob linear_forward_job(float* y, const float* x, const float* w, int M, int N, int K);
// The term dy[M,N] · W of dx[M,K] (dx's job: M x K, ldc K).
GemmTerm linear_backward_x_term(const float* dy, const float* w, int N, int K);
// dw[N,K] += dy[M,N]^T · x.
GemmJob linear_backward_w_job(float* dw, const float* dy, const float* x, int M, int N, int K);
// y[r, :] += bias for rows r < M.
void add_bias(float* y, const float* bias, int M, int N);

// y = x · W^T (+ bias when not null).
void linear_forward(float* y, const float* x, const float* w, const float* bias, int M, int N, int K);
// dx (+)= dy · W.
void linear_backward_x(float* dx, const float* dy, const float* w, int M, int N, int K, bool accumulate);
// dw += dy^T · x.
void linear_backward_w(float* dw, const float* dy, const float* x, int M, int N, int K);

}  // namespace mtb::kernels
