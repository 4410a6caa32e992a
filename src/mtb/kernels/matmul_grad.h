// Matrix products for training, all fp32: the forward y = x W^T and the two backward
// products dX = dY W and dW += dY^T X, as one packed, blocked GEMM over strided views
// (so a transposed operand costs nothing but its packing).
#pragma once
#include <cstdint>

namespace mtb::kernels {

// A matrix operand as a strided view: element (i, j) is p[i * rs + j * cs].
struct MatView {
  const float* p = nullptr;
  int64_t rs = 0, cs = 0;
};

// C[M,N] (+)= A[M,K] · B[K,N]. C is row-major with row stride ldc; `accumulate` adds to
// C, else C is overwritten. K = 0 gives zeros (or leaves C unchanged when accumulating).
// Picks the AVX2 kernel (threaded over tiles of C) when available, else gemm_ref.
void gemm(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate);
// The scalar twin: plain loops, one thread, float accumulation in index order of k.
void gemm_ref(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate);
// The AVX2+FMA kernel itself: 6x16 register tiles over packed panels; threads from
// core/parallel.h split C into tiles, each computed by one thread in a fixed order.
void gemm_avx2(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate);

// The three products of a linear layer y = x W^T + b, W [N, K] row-major, x [M, K]:
// y[M,N] = x · W^T (+ bias[N] when not null).
void linear_forward(float* y, const float* x, const float* w, const float* bias, int M, int N, int K);
// dx[M,K] (+)= dy[M,N] · W.
void linear_backward_x(float* dx, const float* dy, const float* w, int M, int N, int K, bool accumulate);
// dw[N,K] += dy[M,N]^T · x.
void linear_backward_w(float* dw, const float* dy, const float* x, int M, int N, int K);

}  // namespace mtb::kernels
