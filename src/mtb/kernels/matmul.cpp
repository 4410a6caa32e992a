#include "mtb/kernels/matmul.h"

#include <vector>

#include "mtb/kernels/cpu.h"

namespace mtb::kernels {

void matmul(float* y, const float* x, const void* w, DType wtype, const float* bias,
            int M, int N, int K) {
  if (use_avx2()) matmul_avx2(y, x, w, wtype, bias, M, N, K);
  else matmul_ref(y, x, w, wtype, bias, M, N, K);
}

void matmul_ref(float* y, const float* x, const void* w, DType wtype, const float* bias,
                int M, int N, int K) {
  thread_local std::vector<float> row;  // grows once, so decoding allocates nothing
  if (row.size() < size_t(K)) row.resize(size_t(K));
  const size_t row_bytes = dtype_bytes(wtype, K);
  for (int n = 0; n < N; ++n) {
    to_f32(wtype, static_cast<const uint8_t*>(w) + size_t(n) * row_bytes, row.data(), size_t(K));
    for (int m = 0; m < M; ++m) {
      const float* xm = x + size_t(m) * K;
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += xm[k] * row[k];
      y[size_t(m) * N + n] = acc + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace mtb::kernels
