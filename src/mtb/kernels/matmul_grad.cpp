#include "mtb/kernels/matmul_grad.h"

#include "mtb/kernels/cpu.h"

namespace mtb::kernels {

void gemm(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate) {
  if (use_avx2()) gemm_avx2(M, N, K, A, B, C, ldc, accumulate);
  else gemm_ref(M, N, K, A, B, C, ldc, accumulate);
}

void gemm_ref(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += A.p[i * A.rs + k * A.cs] * B.p[k * B.rs + j * B.cs];
      float& c = C[i * ldc + j];
      c = accumulate ? c + acc : acc;
    }
}

void linear_forward(float* y, const float* x, const float* w, const float* bias, int M, int N, int K) {
  gemm(M, N, K, {x, K, 1}, {w, 1, K}, y, N, false);
  if (bias)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) y[int64_t(m) * N + n] += bias[n];
}

void linear_backward_x(float* dx, const float* dy, const float* w, int M, int N, int K, bool accumulate) {
  gemm(M, K, N, {dy, N, 1}, {w, K, 1}, dx, K, accumulate);
}

void linear_backward_w(float* dw, const float* dy, const float* x, int M, int N, int K) {
  gemm(N, K, M, {dy, 1, N}, {x, K, 1}, dw, K, true);
}

}  // namespace mtb::kernels
