#include "mtb/kernels/matmul_grad.h"

#include <stdexcept>

#include "mtb/kernels/cpu.h"

namespace mtb::kernels {

GemmJob& GemmJob::add(const GemmTerm& t) {
  if (n_terms >= kMaxTerms) throw std::logic_error("GemmJob: more than 4 terms");
  terms[n_terms++] = t;
  return *this;
}

void gemm_jobs(const GemmJob* jobs, int n_jobs) {
  if (use_avx2()) gemm_jobs_avx2(jobs, n_jobs);
  else gemm_jobs_ref(jobs, n_jobs);
}

namespace {
// Element e of a term's B, as a float.
float b_at(const GemmTerm& g, int64_t e) {
  switch (g.b_type) {
    case DType::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(g.B.p)[e]);
    case DType::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(g.B.p)[e]);
    default: return g.B.p[e];
  }
}
}  // namespace

void gemm_jobs_ref(const GemmJob* jobs, int n_jobs) {
  for (int q = 0; q < n_jobs; ++q) {
    const GemmJob& job = jobs[q];
    for (int i = 0; i < job.M; ++i)
      for (int j = 0; j < job.N; ++j) {
        float acc = 0.0f;
        for (int t = 0; t < job.n_terms; ++t) {
          const GemmTerm& g = job.terms[t];
          for (int k = 0; k < g.K; ++k) acc += g.A.p[i * g.A.rs + k * g.A.cs] * b_at(g, k * g.B.rs + j * g.B.cs);
        }
        float& c = job.C[i * job.ldc + j];
        c = job.accumulate ? c + acc : acc;
      }
  }
}

namespace {
GemmJob single(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate) {
  GemmJob j;
  j.M = M, j.N = N, j.C = C, j.ldc = ldc, j.accumulate = accumulate;
  j.add({K, A, B});
  return j;
}
}  // namespace

void gemm(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate) {
  const GemmJob j = single(M, N, K, A, B, C, ldc, accumulate);
  gemm_jobs(&j, 1);
}
void gemm_ref(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate) {
  const GemmJob j = single(M, N, K, A, B, C, ldc, accumulate);
  gemm_jobs_ref(&j, 1);
}
void gemm_avx2(int M, int N, int K, MatView A, MatView B, float* C, int64_t ldc, bool accumulate) {
  const GemmJob j = single(M, N, K, A, B, C, ldc, accumulate);
  gemm_jobs_avx2(&j, 1);
}

GemmJob linear_forward_job(float* y, const float* x, const float* w, int M, int N, int K) {
  return single(M, N, K, {x, K, 1}, {w, 1, K}, y, N, false);
}

GemmTerm linear_backward_x_term(const float* dy, const float* w, int N, int K) {
  return {N, {dy, N, 1}, {w, K, 1}};
}

GemmJob linear_backward_w_job(float* dw, const float* dy, const float* x, int M, int N, int K) {
  return single(N, K, M, {dy, 1, N}, {x, K, 1}, dw, K, true);
}

void add_bias(float* y, const float* bias, int M, int N) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) y[int64_t(m) * N + n] += bias[n];
}

void linear_forward(float* y, const float* x, const float* w, const float* bias, int M, int N, int K) {
  const GemmJob j = linear_forward_job(y, x, w, M, N, K);
  gemm_jobs(&j, 1);
  if (bias) add_bias(y, bias, M, N);
}

void linear_backward_x(float* dx, const float* dy, const float* w, int M, int N, int K, bool accumulate) {
  GemmJob j;
  j.M = M, j.N = K, j.C = dx, j.ldc = K, j.accumulate = accumulate;
  j.add(linear_backward_x_term(dy, w, N, K));
  gemm_jobs(&j, 1);
}

void linear_backward_w(float* dw, const float* dy, const float* x, int M, int N, int K) {
  const GemmJob j = linear_backward_w_job(dw, dy, x, M, N, K);
  gemm_jobs(&j, 1);
}

}  // namespace mtb::kernels
