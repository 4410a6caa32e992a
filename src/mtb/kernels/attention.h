// Causal scaled dot-product attention over rows of packed heads, with grouped K/V heads.
#pragma once
#include <cstdint>

namespace mtb::kernels {

struct AttentionArgs {
  int n_queries = 0;   // query rows
  int q_pos0 = 0;      // absolute position of query row 0; row i sees keys 0 .. q_pos0 + i
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads; query head h reads kv head h / (n_heads / n_kv_heads)
  int qk_dim = 0;      // elements per head of q and k
  int v_dim = 0;       // elements per head of v and out
  float scale = 1.0f;  // multiplies q·k before the softmax
  // q: [n_queries][q_stride], head h at h*qk_dim; k: [keys][k_stride], kv head j at j*qk_dim;
  // v: [keys][v_stride], kv head j at j*v_dim; out: [n_queries][out_stride], head h at h*v_dim.
  const float* q = nullptr;
  int64_t q_stride = 0;
  const float* k = nullptr;
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
};

// Picks the AVX2 kernel (threaded over heads and rows) when available, else attention_ref.
void attention(const AttentionArgs& a);
// The scalar twin: one thread, plain loops, softmax with the running maximum subtracted.
void attention_ref(const AttentionArgs& a);
void attention_avx2(const AttentionArgs& a);

}  // namespace mtb::kernels
