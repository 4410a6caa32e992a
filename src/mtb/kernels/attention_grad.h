// Causal attention for training: a forward that keeps each row's log-sum-exp, and the
// backward that recomputes the probabilities from it (nothing T x T is stored).
// Rows are tokens of n_seqs sequences of seq_len each (row = seq * seq_len + t); each
// sequence attends causally within itself. Query head h reads kv head h / (n_heads / n_kv_heads).
#pragma once
#include <cstdint>

namespace mtb::kernels {

struct AttentionTrainArgs {
  int n_seqs = 0, seq_len = 0;
  int n_heads = 0, n_kv_heads = 0;
  int qk_dim = 0, v_dim = 0;  // per head
  float scale = 1.0f;         // multiplies q·k before the softmax
  // Row-major [rows][stride]; head h of q/out at h*qk_dim / h*v_dim, kv head j of k/v at
  // j*qk_dim / j*v_dim. Strides count floats.
  const float* q = nullptr;
  int64_t q_stride = 0;
  const float* k = nullptr;
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  float* out = nullptr;  // forward: written; backward: read
  int64_t out_stride = 0;
  float* lse = nullptr;  // [rows][n_heads]: forward writes, backward reads
  // Backward only: dout is read; dq, dk, dv are overwritten (laid out like q, k, v).
  const float* dout = nullptr;
  int64_t dout_stride = 0;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// out = softmax(scale q k^T, causal) v per head; lse = log sum_j exp(scale q·k_j).
void attention_train_forward(const AttentionTrainArgs& a);
// dq, dk, dv from dout (and q, k, v, out, lse of the forward).
void attention_train_backward(const AttentionTrainArgs& a);

// Scalar twins (one thread, plain loops) and the AVX2+FMA kernels (threaded over
// (sequence, kv head) pairs, so each dk/dv row has one writer).
void attention_train_forward_ref(const AttentionTrainArgs& a);
void attention_train_backward_ref(const AttentionTrainArgs& a);
void attention_train_forward_avx2(const AttentionTrainArgs& a);
void attention_train_backward_avx2(const AttentionTrainArgs& a);

}  // namespace mtb::kernels
