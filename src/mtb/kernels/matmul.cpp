#include "mtb/kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "mtb/kernels/cpu.h"

namespace mtb::kernels {

void matmul(float* y, const float* x, const void* w, DType wtype, const float* bias,
            int M, int N, int K) {
  if (use_avx2()) matmul_avx2(y, x, w, wtype, bias, M, N, K);
  else matmul_ref(y, x, w, wtype, bias, M, N, K);
}

void matmul_jobs(const MatmulJob* jobs, int n_jobs) {
  if (use_avx2()) matmul_jobs_avx2(jobs, n_jobs);
  else matmul_jobs_ref(jobs, n_jobs);
}

void matmul_jobs_ref(const MatmulJob* jobs, int n_jobs) {
  thread_local std::vector<float> xs, ys;
  for (int i = 0; i < n_jobs; ++i) {
    const MatmulJob& j = jobs[i];
    if (j.M <= 0 || j.N <= 0) continue;
    xs.resize(size_t(j.M) * size_t(j.K)), ys.resize(size_t(j.M) * size_t(j.N));
    for (int m = 0; m < j.M; ++m) std::copy(j.x + m * j.ldx, j.x + m * j.ldx + j.K, xs.begin() + int64_t(m) * j.K);
    matmul_ref(ys.data(), xs.data(), j.w, j.wtype, j.bias, j.M, j.N, j.K);
    for (int m = 0; m < j.M; ++m) std::copy(ys.begin() + int64_t(m) * j.N, ys.begin() + int64_t(m + 1) * j.N, j.y + m * j.ldy);
  }
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
