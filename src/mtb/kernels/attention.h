// Causal scaled dot-product attention over rows of packed heads, with grouped K/V heads.
// K and V may be stored as F32, BF16 or F16 (a KV cache's element type), in consecutive rows
// or in a paged pool through a block table. A query row's result depends only on its query
// and the keys it sees, never on the other rows of the call (batch invariance).
#pragma once
#include <cstddef>
#include <cstdint>

#include "mtb/core/dtype.h"

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
  // Strides count elements. k and v may be the same buffer (MLA's latent serves as both).
  const float* q = nullptr;
  int64_t q_stride = 0;
  DType kv_type = DType::F32;
  const void* k = nullptr;
  int64_t k_stride = 0;
  const void* v = nullptr;
  int64_t v_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  // Paged K/V: key j lies in row block_table[j / block_size] · block_size + j % block_size of
  // k and v (rows k_stride / v_stride apart). Null: key j is row j.
  const int32_t* block_table = nullptr;
  int block_size = 0;
  // Room for the scores: attention_scratch_floats(keys, n_heads) floats, or null to allocate here.
  float* scratch = nullptr;
};

// The row of k and v that holds key j.
inline int64_t key_row(const AttentionArgs& a, int j) {
  return a.block_table ? int64_t(a.block_table[j / a.block_size]) * a.block_size + j % a.block_size : j;
}

// Floats of scratch `attention` needs for up to `max_keys` keys and `max_heads` query heads.
size_t attention_scratch_floats(int max_keys, int max_heads);

// Picks the AVX2 kernel (threaded over heads and rows) when available, else attention_ref.
void attention(const AttentionArgs& a);
// The scalar twin: one thread, plain loops, softmax with the running maximum subtracted.
void attention_ref(const AttentionArgs& a);
void attention_avx2(const AttentionArgs& a);

}  // namespace mtb::kernels
