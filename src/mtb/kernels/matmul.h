// Matrix products with the weight on the right, transposed, as every linear layer uses them.
#pragma once
#include <cstdint>

#include "mtb/core/dtype.h"

namespace mtb::kernels {

// y[M,N] = x[M,K] · W[N,K]^T (+ bias[N] when bias is not null).
// W is row-major [N,K] with elements of type wtype (F32, F16, BF16, or Q8_0 with K a
// multiple of 32), used as stored. Q8_0 weights meet x rounded to Q8_0 blocks as well
// (quantize_q8_act), as ggml does: each block's 32 int8 products are summed exactly in int32
// and scaled by the two blocks' scales.
// Picks the AVX2 kernel (threaded) when available, else matmul_ref.
void matmul(float* y, const float* x, const void* w, DType wtype, const float* bias,
            int M, int N, int K);

// x[K] (K a multiple of 32) rounded to Q8_0 blocks with float scales: for block b,
// d[b] = max|x| / 127 and q[32b+i] = x * (127 / max|x|) rounded to nearest even, in
// [-127, 127] (all zero, d = 0, for a zero block). The AVX2 twin gives the same bits.
void quantize_q8_act(const float* x, int K, int8_t* q, float* d);
void quantize_q8_act_avx2(const float* x, int K, int8_t* q, float* d);

// The scalar twin: plain loops, one thread, float accumulation in index order (Q8_0: in
// block order, over exact int32 block sums).
void matmul_ref(float* y, const float* x, const void* w, DType wtype, const float* bias,
                int M, int N, int K);

// Batch invariance. By default each output y[m][n] is summed in one fixed order whatever the
// number of rows M, so row m's bits never depend on the other rows of x: a sequence's logits
// are the same alone or in any batch, however its prompt was cut. The order is the 256-bit
// decode tiles' (eight lane sums over interleaved parts of k, one fixed horizontal sum, the
// rest of k one by one, the bias); prefill-sized products compute the same sums at GEMM speed
// (matmul_lanes_avx2), and Q8_0 runs the tiles at every size. set_batch_invariant(false)
// (or MTB_NO_BATCH_INVARIANCE=1 in the environment) lets each size take its fastest kernel
// instead: 512-bit and VNNI decode tiles where the CPU has them, and the packed GEMM (whose
// order differs) from 16 rows on.
bool batch_invariant();
void set_batch_invariant(bool on);


// The AVX2+FMA kernel itself (callers use matmul); threads from core/parallel.h. From 16
// rows of x on (prefill) it runs matmul_lanes_avx2, or without batch invariance the packed
// GEMM of matmul_grad.h, non-F32 weights widened to F32 a slab at a time (for Q8_0, x is
// rounded to Q8_0 and back first).
void matmul_avx2(float* y, const float* x, const void* w, DType wtype, const float* bias,
                 int M, int N, int K);

// One product of a batch: y[M,N] (rows ldy apart) = x[M,K] (rows ldx apart) · W[N,K]^T
// (+ bias), W as in matmul.
struct MatmulJob {
  float* y = nullptr;
  int64_t ldy = 0;
  const float* x = nullptr;
  int64_t ldx = 0;
  const void* w = nullptr;
  DType wtype = DType::F32;
  const float* bias = nullptr;
  int M = 0, N = 0, K = 0;
};

// Several products in one parallel call (fewer waits for threads when each is small: the
// projections of one decode step, MLA's per-head products). Outputs must not overlap.
void matmul_jobs(const MatmulJob* jobs, int n_jobs);
void matmul_jobs_ref(const MatmulJob* jobs, int n_jobs);   // scalar twin: matmul_ref per job
void matmul_jobs_avx2(const MatmulJob* jobs, int n_jobs);
// Prefill-sized products (any M) summed exactly as the 256-bit decode tiles sum them, for
// F32, F16 and BF16 weights (AVX2+FMA; matmul_jobs_avx2 calls it). Outputs must not overlap.
void matmul_lanes_avx2(const MatmulJob* jobs, int n_jobs);

}  // namespace mtb::kernels
