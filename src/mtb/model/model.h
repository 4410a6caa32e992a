// Model: a config plus its checked weights, and the forward pass over a sequence.
// Model code is plain: it calls kernels (which own SIMD and threads) and never touches
// file formats.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/core/tensor.h"
#include "mtb/model/config.h"

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
  Linear w_gate, w_up, w_down;    // SwiGLU, or GELU MLP (w_up = fc, w_down = proj)
};

class Model {
 public:
  // Checks every tensor against the config (see check_tensors); throws mtb::Error naming
  // `where` or the tensor's file.
  Model(ModelConfig config, TensorMap tensors, const std::string& where);

  const ModelConfig& config() const { return config_; }
  const TensorMap& tensors() const { return tensors_; }

  // Logits [ids.size()][vocab] for every position of one sequence starting at position 0.
  // Throws mtb::Error for an empty sequence, a token id outside the vocabulary, or a
  // sequence longer than the context.
  std::vector<float> forward(const std::vector<int32_t>& ids) const;

 private:
  void embed(const std::vector<int32_t>& ids, float* x) const;
  void attention(const LayerWeights& w, int layer, const float* h, int T, float* out) const;
  void attention_mla(const LayerWeights& w, int layer, const float* h, int T, float* out) const;
  void ffn(const LayerWeights& w, const float* h, int T, float* out) const;
  void norm(const Norm& n, const float* x, int T, float* out) const;
  void rope_tables(int pos0, int T, std::vector<float>& cos, std::vector<float>& sin) const;

  ModelConfig config_;
  TensorMap tensors_;
  Tensor tok_embed_, pos_embed_, lm_head_;
  Norm final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<double> inv_freq_;
};

}  // namespace mtb
