// Model: a config plus its checked weights, and the forward pass over a sequence.
// Model code is plain: it calls kernels (which own SIMD and threads) and never touches
// file formats.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/core/tensor.h"
#include "mtb/model/config.h"
#include "mtb/model/kv_cache.h"

namespace mtb {

// A linear layer y = x W^T + b, W [out, in] used as stored (mapped file or owned buffer).
struct Linear {
  Tensor w;
  std::vector<float> b;  // empty: no bias
  int out() const { return int(w.shape[0]); }
  int in() const { return int(w.shape[1]); }
};

// A norm's learned scale (and LayerNorm's bias), widened to fp32 at load.
struct Norm {
  std::vector<float> g, b;
};

struct LayerWeights {
  Norm attn_norm, ffn_norm;
  Linear wq, wk, wv, wo;          // standard attention (MLA: wq when q_lora_rank = 0, and wo)
  Norm q_norm, k_norm;            // QK-norm, [head_dim]
  Linear wq_a, wq_b, wkv_a, wkv_b;  // MLA
  Norm q_a_norm, kv_a_norm;       // MLA
  Tensor w_uk_t;                  // MLA absorbed: W_UK per head, transposed: [H·kv_lora_rank, qk_nope]
  Linear w_gate, w_up, w_down;    // SwiGLU, or GELU MLP (w_up = fc, w_down = proj)
};

// How MLA attends. Plain: up-project every cached latent to per-head keys and values.
// Absorbed: map the query into latent space through W_UK, attend over the cached latents
// and RoPE keys directly, apply W_UV after. Auto: absorbed. One form for every step keeps a
// token's results independent of how its prompt was cut (the two forms round differently).
enum class MlaForm { Auto, Plain, Absorbed };

struct ForwardOptions {
  MlaForm mla = MlaForm::Auto;
  bool all_logits = false;  // logits of every new token, else of the last one only
};

// One sequence's part of a batched forward: n new tokens at positions pos0 .. pos0 + n - 1.
// Their K/V rows (and those of the positions before) are found through a block table: key j
// is cache row block_table[j / block_size] · block_size + j % block_size; a null table means
// key j is row j (a cache of one sequence).
struct BatchSegment {
  enum class Logits { None, Last, All };
  const int32_t* ids = nullptr;
  int n = 0, pos0 = 0;
  const int32_t* block_table = nullptr;
  int block_size = 0;
  Logits logits = Logits::Last;
};

// Scratch for forward(): sized once for up to `max_tokens` new tokens per call and a cache
// of `capacity` tokens, so that decoding allocates nothing.
struct Workspace {
  int max_tokens = 0, capacity = 0;
  bool plain_mla_over_cache = false;  // room to up-project the whole cache (MlaForm::Plain)
  std::vector<float> x, h, y;         // [T, d]
  std::vector<float> q, k, v, att;    // [T, ...] projections and attention output
  std::vector<float> gate, up;        // [T, d_ff]
  int max_logit_rows = 0;
  std::vector<int32_t> pos;           // [T] each new token's position
  std::vector<float> logits;          // [max_logit_rows, vocab]
  std::vector<float> cos, sin;        // [T, rope_dim / 2]
  std::vector<float> scores;          // attention kernel scratch
  std::vector<float> qa, kva;         // MLA: [T, q_lora_rank], [T, kv_lora + rope]
  std::vector<float> lat, kv_all, k_all, v_all;  // MLA plain: [n, dc], [n, H(nope+dv)], [n, H, qk], [n, H, dv]
  std::vector<float> q_abs, att_lat, gather, head_out;  // MLA absorbed (gather, head_out: unused now)
};

class Model {
 public:
  // Checks every tensor against the config (see check_tensors); throws mtb::Error naming
  // `where` or the tensor's file.
  Model(ModelConfig config, TensorMap tensors, const std::string& where);

  const ModelConfig& config() const { return config_; }
  const TensorMap& tensors() const { return tensors_; }

  // Logits [ids.size()][vocab] for every position of one sequence starting at position 0
  // (a fresh F32 cache). Throws mtb::Error for an empty sequence, a token id outside the
  // vocabulary, or a sequence longer than the context.
  std::vector<float> forward(const std::vector<int32_t>& ids) const;

  // Appends T tokens to `cache` (at positions cache.size() ...) and returns the logits of
  // the last one, or of all T with options.all_logits: [T or 1][vocab], inside `ws`.
  // Throws mtb::Error for bad ids or when the cache would overflow (nothing is appended then).
  const float* forward(const int32_t* ids, int T, KVCache& cache, Workspace& ws,
                       const ForwardOptions& options = {}) const;

  // The batched forward: the tokens of every segment (sequences at any positions) go through
  // each projection as one matrix product, and each segment attends over its own cached keys
  // (written first for this step's tokens, into the rows its block table names). Returns the
  // logits the segments ask for, in segment order: [rows][vocab] inside `ws`. A segment's
  // results are the same bits whatever else is in the batch (see kernels/matmul.h). Throws
  // mtb::Error, computing nothing, for bad ids, positions, rows or sizes.
  const float* forward_batch(const BatchSegment* segs, int n_segs, KVCache& cache, Workspace& ws,
                             MlaForm mla = MlaForm::Auto) const;

  // Room for up to max_tokens new tokens per step, sequences of up to `capacity` keys, and
  // the logits of max_tokens rows (all_logits) or of `logit_rows`.
  Workspace make_workspace(int max_tokens, int capacity, MlaForm mla = MlaForm::Auto, bool all_logits = false,
                           int logit_rows = 1) const;

 private:
  void embed(const int32_t* ids, int T, const int32_t* pos, float* x, float* scratch) const;
  void attention(const LayerWeights& w, int layer, const BatchSegment* segs, int n_segs, int T, KVCache& cache,
                 Workspace& ws) const;
  void attention_mla(const LayerWeights& w, int layer, const BatchSegment* segs, int n_segs, int T, KVCache& cache,
                     Workspace& ws, bool plain) const;
  void ffn(const LayerWeights& w, int T, Workspace& ws) const;
  void norm(const Norm& n, const float* x, int T, float* out) const;
  void rope_tables(int T, Workspace& ws) const;

  ModelConfig config_;
  TensorMap tensors_;
  Tensor tok_embed_, pos_embed_, lm_head_;
  Norm final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<double> inv_freq_;
};

}  // namespace mtb
