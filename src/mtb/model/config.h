// ModelConfig: one struct for every block variant of the chapter, from the 2019 GPT-2
// block to DeepSeek's MLA. A switch per upgrade; validate() refuses impossible combinations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mtb/kernels/ops.h"

namespace mtb {

using kernels::RopeLayout;

enum class NormKind { RMSNorm, LayerNorm };
enum class FfnKind { SwiGLU, GeluMlp };          // down(silu(gate x) * up x) | proj(gelu(fc x))
enum class PositionKind { RoPE, Learned, None };  // rotate q,k | learned absolute table | nothing
enum class AttentionKind { Standard, MLA };       // MHA/MQA/GQA follow from kv_heads
enum class BiasKind { None, QKV, All };           // Llama | Qwen2 | GPT-2

struct RopeScaling {
  enum class Type { None, Llama3, Yarn } type = Type::None;
  double factor = 1.0;
  double low_freq_factor = 1.0;    // llama3
  double high_freq_factor = 4.0;   // llama3
  int original_max_position = 0;   // llama3, yarn
};

// A mixture-of-experts FFN, described for planning (parameter counts); not run yet.
struct MoeSpec {
  int n_dense_layers = 0;   // the first layers keep a dense FFN (DeepSeek's first_k_dense_replace)
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int experts_per_token = 0;
  int expert_d_ff = 0;
  bool enabled() const { return n_routed_experts > 0; }
};

struct ModelConfig {
  std::string family = "llama";  // the Hugging Face model_type this config is written as
  int vocab = 0;
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // = n_heads: MHA, 1: MQA, between: GQA (ignored by MLA)
  int head_dim = 0;    // explicit; may differ from d_model / n_heads
  int d_ff = 0;
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-6;
  FfnKind ffn = FfnKind::SwiGLU;
  PositionKind position = PositionKind::RoPE;
  RopeLayout rope_layout = RopeLayout::RotateHalf;
  double rope_base = 10000.0;
  RopeScaling rope_scaling;
  std::vector<bool> nope_layers;  // empty, or one per layer: true = this layer skips RoPE
  AttentionKind attention = AttentionKind::Standard;
  int q_lora_rank = 0;  // MLA: 0 = plain q projection
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool qk_norm = false;
  bool tied_embeddings = false;
  BiasKind bias = BiasKind::None;
  int max_context = 2048;
  MoeSpec moe;
  int bos_id = -1;                // -1: none known
  std::vector<int32_t> eos_ids;   // generation stops on these

  // Throws mtb::Error("<where>: ...") for an impossible combination.
  void validate(const std::string& where = "config") const;

  bool layer_uses_rope(int layer) const {
    return position == PositionKind::RoPE && (nope_layers.empty() || !nope_layers[size_t(layer)]);
  }
  bool is_mla() const { return attention == AttentionKind::MLA; }
  bool layer_is_moe(int layer) const { return moe.enabled() && layer >= moe.n_dense_layers; }
  // Per-head sizes of q·k and of v/attention output.
  int qk_head_dim() const { return is_mla() ? qk_nope_head_dim + qk_rope_head_dim : head_dim; }
  int v_dim() const { return is_mla() ? v_head_dim : head_dim; }
  // Dims of each query/key head that RoPE rotates.
  int rope_dim() const { return is_mla() ? qk_rope_head_dim : head_dim; }
  // Multiplier of q·k before the softmax.
  double attention_scale() const;
  // The context a cache gets for a request of `requested` tokens (0: max_context). Throws
  // mtb::Error when there is none or it is past max_context.
  int context_for(int requested) const;
  // Elements per token per layer held by the KV cache: 2 n_kv dh, or MLA's d_c + d_R.
  int64_t kv_elements_per_token_per_layer() const;
  int64_t kv_bytes_per_token(int bytes_per_element) const {
    return kv_elements_per_token_per_layer() * n_layers * bytes_per_element;
  }
  // RoPE inverse frequencies theta_i = base^(-2i/rope_dim), after rope_scaling.
  std::vector<double> rope_inv_freq() const;
};

// Parameters by component, counted from the config alone (tied: the head counts zero).
struct ParamCount {
  int64_t embedding = 0;     // token embedding
  int64_t positions = 0;     // learned position table
  int64_t attention = 0;     // all layers: projections, biases, QK-norm / MLA norms
  int64_t ffn = 0;           // all layers (MoE: every expert, shared experts and routers)
  int64_t norms = 0;         // the per-layer pre-norms and the final norm
  int64_t lm_head = 0;
  int64_t total() const { return embedding + positions + attention + ffn + norms + lm_head; }
};
ParamCount count_params(const ModelConfig& c);

// The named presets of `mtb info --preset`.
std::vector<std::string> preset_names();
// Throws mtb::Error listing the known names when name is unknown.
ModelConfig preset(const std::string& name);

std::string to_string(NormKind k);
std::string to_string(FfnKind k);
std::string to_string(PositionKind k);
std::string to_string(RopeLayout k);
std::string to_string(BiasKind k);

}  // namespace mtb
