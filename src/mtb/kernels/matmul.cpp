#include "mtb/kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mtb/kernels/cpu.h"

namespace mtb::kernels {

namespace {
std::atomic<bool> g_invariant{[] {
  const char* e = std::getenv("MTB_NO_BATCH_INVARIANCE");
  return !(e && e[0] == '1');
}()};
}  // namespace

bool batch_invariant() { return g_invariant.load(std::memory_order_relaxed); }
void set_batch_invariant(bool on) { g_invariant.store(on, std::memory_order_relaxed); }

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

void quantize_q8_act(const float* x, int K, int8_t* q, float* d) {
  for (int b = 0; b < K / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    d[b] = amax / 127.0f;
    for (int i = 0; i < kQ8Block; ++i) q[b * kQ8Block + i] = int8_t(std::nearbyint(xb[i] * id));
  }
}

namespace {

// Q8_0 weights against x rounded to Q8_0: per row of x, per block, an exact int32 sum of the
// 32 products, scaled by both block scales, added in block order.
void matmul_ref_q8(float* y, const float* x, const uint8_t* w, const float* bias, int M, int N, int K) {
  const int nb = K / kQ8Block;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xd;
  xq.resize(size_t(K)), xd.resize(size_t(nb));
  for (int m = 0; m < M; ++m) {
    quantize_q8_act(x + size_t(m) * K, K, xq.data(), xd.data());
    for (int n = 0; n < N; ++n) {
      const uint8_t* row = w + size_t(n) * nb * kQ8BlockBytes;
      float acc = 0.0f;
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = row + size_t(b) * kQ8BlockBytes;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        int32_t isum = 0;
        for (int i = 0; i < kQ8Block; ++i) isum += int32_t(int8_t(blk[2 + i])) * xq[size_t(b * kQ8Block + i)];
        acc += f16_to_f32(h) * xd[size_t(b)] * float(isum);
      }
      y[size_t(m) * N + n] = acc + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace

void matmul_ref(float* y, const float* x, const void* w, DType wtype, const float* bias,
                int M, int N, int K) {
  if (wtype == DType::Q8_0) return matmul_ref_q8(y, x, static_cast<const uint8_t*>(w), bias, M, N, K);
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
