// The forward pass over a batch of sequences with the activations kept, the fused
// softmax cross-entropy, and the backward pass into a Trainable's gradients: every variant
// ModelConfig describes (RMSNorm/LayerNorm, SwiGLU/GELU MLP, RoPE in both layouts with Llama 3
// scaling and NoPE layers, MHA/MQA/GQA, QK-norm, MLA with or without q-lora, tied/untied
// embeddings, learned positions, biases). Plain code: kernels own SIMD and threads.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/model/config.h"
#include "mtb/train/trainable.h"

namespace mtb::train {

// Targets equal to this are skipped by the loss (PyTorch's default ignore_index).
inline constexpr int32_t kIgnoreIndex = -100;

struct LossSum {
  double sum = 0.0;   // summed token losses (nats)
  int64_t count = 0;  // targets that counted
  double mean() const { return count ? sum / double(count) : 0.0; }
};

struct LayerActivations {
  std::vector<float> x, mid;          // [M, d] layer input, and after the attention residual
  std::vector<float> h1, h2;          // [M, d] outputs of the two pre-norms
  std::vector<float> q_raw, k_raw;    // before QK-norm (qk_norm only)
  std::vector<float> q, k, v;         // as attention reads them (MLA: per-head K, V assembled)
  std::vector<float> lse;             // [M, n_heads] softmax log-sum-exp per row and head
  std::vector<float> att;             // [M, n_heads * v_dim] attention output
  std::vector<float> qa_raw, qa;      // MLA q-lora: [M, q_lora_rank] before and after its norm
  std::vector<float> kva;             // MLA: [M, kv_lora_rank + rope] kv_a output (pre-norm, pre-RoPE)
  std::vector<float> lat;             // MLA: [M, kv_lora_rank] normalized latent
  std::vector<float> gate, up, act;   // [M, d_ff]: SwiGLU gate/up/silu(gate)*up; GELU: up = fc, act = gelu(fc)
};

// What the forward keeps for the backward, plus the backward's scratch; sized on first use
// for a config and batch shape, reused while they stay the same.
struct Activations {
  int batch = 0, seq_len = 0;
  std::vector<LayerActivations> layers;
  std::vector<float> x_final, h_final;  // [M, d] last residual stream and its norm
  std::vector<float> logits;            // [M, vocab]; after the loss, its gradient
  std::vector<float> cos, sin;          // [T, rope_dim / 2]
  std::vector<int32_t> positions;       // [M]: t of each row
  // backward scratch
  std::vector<float> dx, dh, datt, dq, dk, dv, dkv, dkr, dkva, dlat, dqa, dgate, dup, dact, kv;
};

// Targets that count (not ignore_index) among n.
int64_t count_targets(const int32_t* targets, int64_t n, int32_t ignore_index = kIgnoreIndex);

// Forward and backward over B sequences of T tokens: ids and targets are [B][T], row-major.
// Adds grad_scale x d(sum of token losses)/d(parameter) to t.grads() (zero them first, or
// leave them to accumulate micro-batches) and returns the summed loss. For the mean over a
// batch split in micro-batches, pass grad_scale = 1 / count_targets(whole batch).
// Throws mtb::Error for an id or target outside the vocabulary (other than ignore_index),
// T past a learned position table, or an empty batch.
LossSum forward_backward(Trainable& t, const int32_t* ids, const int32_t* targets, int B, int T,
                         Activations& acts, float grad_scale, int32_t ignore_index = kIgnoreIndex);

// One batch, mean loss: zero nothing, add the gradient of the mean over its counted targets.
double forward_backward_mean(Trainable& t, const int32_t* ids, const int32_t* targets, int B, int T,
                             Activations& acts, int32_t ignore_index = kIgnoreIndex);

// Forward only (validation): the summed loss; gradients untouched.
LossSum evaluate(const Trainable& t, const int32_t* ids, const int32_t* targets, int B, int T,
                 Activations& acts, int32_t ignore_index = kIgnoreIndex);

// Floating-point operations of one training step (forward + backward) over B x T tokens:
// 6 x matrix parameters used per token (embedding lookups excluded, a tied head included)
// plus 3 x the causal attention products (q·k and p·v over i(i+1)/2 pairs per sequence).
double train_step_flops(const ModelConfig& c, int B, int T);

}  // namespace mtb::train
