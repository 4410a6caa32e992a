#include "mtb/kernels/attention_grad.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/kernels/cpu.h"

namespace mtb::kernels {

void attention_train_forward(const AttentionTrainArgs& a) {
  if (use_avx2()) attention_train_forward_avx2(a);
  else attention_train_forward_ref(a);
}

void attention_train_backward(const AttentionTrainArgs& a) {
  if (use_avx2()) attention_train_backward_avx2(a);
  else attention_train_backward_ref(a);
}

void attention_train_forward_ref(const AttentionTrainArgs& a) {
  const int group = a.n_heads / a.n_kv_heads, T = a.seq_len;
  std::vector<float> p(size_t(std::max(T, 1)));
  for (int s = 0; s < a.n_seqs; ++s)
    for (int i = 0; i < T; ++i) {
      const int64_t row = int64_t(s) * T + i;
      for (int h = 0; h < a.n_heads; ++h) {
        const int kvh = h / group;
        const float* q = a.q + row * a.q_stride + int64_t(h) * a.qk_dim;
        float mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const float* k = a.k + (int64_t(s) * T + j) * a.k_stride + int64_t(kvh) * a.qk_dim;
          float dot = 0.0f;
          for (int d = 0; d < a.qk_dim; ++d) dot += q[d] * k[d];
          p[j] = dot * a.scale;
          mx = std::max(mx, p[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - mx);
        float* o = a.out + row * a.out_stride + int64_t(h) * a.v_dim;
        for (int d = 0; d < a.v_dim; ++d) o[d] = 0.0f;
        for (int j = 0; j <= i; ++j) {
          const float* v = a.v + (int64_t(s) * T + j) * a.v_stride + int64_t(kvh) * a.v_dim;
          const float w = p[j] / sum;
          for (int d = 0; d < a.v_dim; ++d) o[d] += w * v[d];
        }
        a.lse[row * a.n_heads + h] = mx + std::log(sum);
      }
    }
}

void attention_train_backward_ref(const AttentionTrainArgs& a) {
  const int group = a.n_heads / a.n_kv_heads, T = a.seq_len;
  for (int s = 0; s < a.n_seqs; ++s)
    for (int j = 0; j < T; ++j) {
      const int64_t row = int64_t(s) * T + j;
      for (int d = 0; d < a.n_kv_heads * a.qk_dim; ++d) a.dk[row * a.k_stride + d] = 0.0f;
      for (int d = 0; d < a.n_kv_heads * a.v_dim; ++d) a.dv[row * a.v_stride + d] = 0.0f;
    }
  for (int s = 0; s < a.n_seqs; ++s)
    for (int i = 0; i < T; ++i) {
      const int64_t row = int64_t(s) * T + i;
      for (int h = 0; h < a.n_heads; ++h) {
        const int kvh = h / group;
        const float* q = a.q + row * a.q_stride + int64_t(h) * a.qk_dim;
        const float* o = a.out + row * a.out_stride + int64_t(h) * a.v_dim;
        const float* dout = a.dout + row * a.dout_stride + int64_t(h) * a.v_dim;
        float* dq = a.dq + row * a.q_stride + int64_t(h) * a.qk_dim;
        const float lse = a.lse[row * a.n_heads + h];
        float di = 0.0f;  // dout · out = sum_j p_j (dout · v_j)
        for (int d = 0; d < a.v_dim; ++d) di += dout[d] * o[d];
        for (int d = 0; d < a.qk_dim; ++d) dq[d] = 0.0f;
        for (int j = 0; j <= i; ++j) {
          const int64_t krow = int64_t(s) * T + j;
          const float* k = a.k + krow * a.k_stride + int64_t(kvh) * a.qk_dim;
          const float* v = a.v + krow * a.v_stride + int64_t(kvh) * a.v_dim;
          float* dk = a.dk + krow * a.k_stride + int64_t(kvh) * a.qk_dim;
          float* dv = a.dv + krow * a.v_stride + int64_t(kvh) * a.v_dim;
          float sc = 0.0f, dp = 0.0f;
          for (int d = 0; d < a.qk_dim; ++d) sc += q[d] * k[d];
          for (int d = 0; d < a.v_dim; ++d) dp += dout[d] * v[d];
          const float p = std::exp(sc * a.scale - lse);
          const float ds = p * (dp - di) * a.scale;
          for (int d = 0; d < a.qk_dim; ++d) dq[d] += ds * k[d];
          for (int d = 0; d < a.qk_dim; ++d) dk[d] += ds * q[d];
          for (int d = 0; d < a.v_dim; ++d) dv[d] += p * dout[d];
        }
      }
    }
}

}  // namespace mtb::kernels
