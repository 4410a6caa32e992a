#include "mtb/model/config.h"

#include <cmath>

#include "mtb/core/error.h"

namespace mtb {

void ModelConfig::validate(const std::string& where) const {
  auto fail = [&](const std::string& msg) { throw Error(where + ": " + msg); };
  auto positive = [&](int v, const char* key) {
    if (v <= 0) fail(std::string(key) + " must be positive, got " + std::to_string(v));
  };
  positive(vocab, "vocab");
  positive(d_model, "d_model");
  positive(n_layers, "n_layers");
  positive(n_heads, "n_heads");
  if (!(norm_eps > 0.0) || !std::isfinite(norm_eps)) fail("norm eps must be positive");
  if (!moe.enabled() || moe.n_dense_layers > 0) positive(d_ff, "d_ff");
  if (ffn == FfnKind::GeluMlp && moe.enabled()) fail("a mixture of experts needs SwiGLU experts");
  if (moe.enabled()) {
    positive(moe.expert_d_ff, "moe expert d_ff");
    if (moe.experts_per_token <= 0 || moe.experts_per_token > moe.n_routed_experts)
      fail("experts per token must be in 1..n_routed_experts");
  }
  if (!nope_layers.empty() && int(nope_layers.size()) != n_layers)
    fail("NoPE layer list has " + std::to_string(nope_layers.size()) + " entries for " +
         std::to_string(n_layers) + " layers");
  if (!nope_layers.empty() && position != PositionKind::RoPE)
    fail("NoPE layers need RoPE positions");
  if (position == PositionKind::Learned) positive(max_context, "max_context (learned positions)");
  if (max_context < 0) fail("max_context must not be negative");
  if (position == PositionKind::RoPE && !(rope_base > 1.0))
    fail("RoPE base must be greater than 1, got " + std::to_string(rope_base));
  if (rope_scaling.type != RopeScaling::Type::None) {
    if (!(rope_scaling.factor > 0.0)) fail("rope_scaling factor must be positive");
    if (rope_scaling.type == RopeScaling::Type::Llama3) {
      positive(rope_scaling.original_max_position, "rope_scaling original_max_position_embeddings");
      if (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) || !(rope_scaling.low_freq_factor > 0))
        fail("rope_scaling needs 0 < low_freq_factor < high_freq_factor");
    }
  }
  if (bos_id >= vocab) fail("bos_token_id " + std::to_string(bos_id) + " is outside the vocabulary");
  for (int32_t e : eos_ids)
    if (e < 0 || e >= vocab) fail("eos_token_id " + std::to_string(e) + " is outside the vocabulary");
  if (is_mla()) {
    positive(kv_lora_rank, "kv_lora_rank");
    positive(qk_rope_head_dim, "qk_rope_head_dim");
    positive(v_head_dim, "v_head_dim");
    if (qk_nope_head_dim < 0) fail("qk_nope_head_dim must not be negative");
    if (q_lora_rank < 0) fail("q_lora_rank must not be negative");
    if (qk_rope_head_dim % 2) fail("RoPE dimension qk_rope_head_dim must be even, got " + std::to_string(qk_rope_head_dim));
    if (position != PositionKind::RoPE) fail("MLA needs RoPE positions (its decoupled RoPE key)");
    if (qk_norm) fail("QK-norm is not defined for MLA (keys are never materialized at inference)");
    if (bias != BiasKind::None) fail("MLA has no projection biases");
  } else {
    positive(n_kv_heads, "n_kv_heads");
    positive(head_dim, "head_dim");
    if (n_heads % n_kv_heads)
      fail("n_heads (" + std::to_string(n_heads) + ") is not divisible by n_kv_heads (" +
           std::to_string(n_kv_heads) + ")");
    if (position == PositionKind::RoPE && head_dim % 2)
      fail("RoPE needs an even head_dim, got " + std::to_string(head_dim));
  }
}

double ModelConfig::attention_scale() const { return 1.0 / std::sqrt(double(qk_head_dim())); }

int64_t ModelConfig::kv_elements_per_token_per_layer() const {
  if (is_mla()) return int64_t(kv_lora_rank) + qk_rope_head_dim;
  return 2 * int64_t(n_kv_heads) * head_dim;
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  const int rot = rope_dim();
  std::vector<double> f(size_t(rot / 2));
  for (int i = 0; i < rot / 2; ++i) f[size_t(i)] = std::pow(rope_base, -2.0 * i / rot);
  if (rope_scaling.type == RopeScaling::Type::Llama3) {
    const RopeScaling& s = rope_scaling;
    const double orig = s.original_max_position;
    const double low_wavelen = orig / s.low_freq_factor, high_wavelen = orig / s.high_freq_factor;
    for (double& fi : f) {
      const double wavelen = 2.0 * M_PI / fi;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        fi /= s.factor;
      } else {
        const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        fi = (1.0 - smooth) * fi / s.factor + smooth * fi;
      }
    }
  }
  return f;
}

ParamCount count_params(const ModelConfig& c) {
  ParamCount p;
  const int64_t d = c.d_model, V = c.vocab, h = c.n_heads;
  p.embedding = V * d;
  if (c.position == PositionKind::Learned) p.positions = int64_t(c.max_context) * d;
  if (!c.tied_embeddings) p.lm_head = V * d;
  const int64_t norm_size = c.norm == NormKind::LayerNorm ? 2 * d : d;
  p.norms = (2 * int64_t(c.n_layers) + 1) * norm_size;
  int64_t attn = 0;
  if (c.is_mla()) {
    const int64_t qk = c.qk_head_dim();
    attn += c.q_lora_rank > 0 ? d * c.q_lora_rank + c.q_lora_rank + int64_t(c.q_lora_rank) * h * qk : d * h * qk;
    attn += d * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank;
    attn += int64_t(c.kv_lora_rank) * h * (c.qk_nope_head_dim + c.v_head_dim);
    attn += h * c.v_head_dim * d;
  } else {
    const int64_t q = h * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim;
    attn += d * q + 2 * d * kv + q * d;
    if (c.bias != BiasKind::None) attn += q + 2 * kv;
    if (c.bias == BiasKind::All) attn += d;
    if (c.qk_norm) attn += 2 * int64_t(c.head_dim);
  }
  p.attention = attn * c.n_layers;
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.layer_is_moe(l)) {
      const int64_t expert = 3 * d * c.moe.expert_d_ff;
      p.ffn += expert * (c.moe.n_routed_experts + c.moe.n_shared_experts) + d * c.moe.n_routed_experts;
    } else if (c.ffn == FfnKind::SwiGLU) {
      p.ffn += 3 * d * c.d_ff;
    } else {
      p.ffn += 2 * d * c.d_ff + (c.bias == BiasKind::All ? c.d_ff + d : 0);
    }
  }
  return p;
}

std::string to_string(NormKind k) { return k == NormKind::RMSNorm ? "RMSNorm" : "LayerNorm"; }
std::string to_string(FfnKind k) { return k == FfnKind::SwiGLU ? "SwiGLU" : "GELU MLP"; }
std::string to_string(PositionKind k) {
  return k == PositionKind::RoPE ? "RoPE" : k == PositionKind::Learned ? "learned absolute" : "none";
}
std::string to_string(RopeLayout k) { return k == RopeLayout::RotateHalf ? "rotate-half" : "interleaved"; }
std::string to_string(BiasKind k) {
  return k == BiasKind::None ? "none" : k == BiasKind::QKV ? "QKV" : "all";
}

int ModelConfig::context_for(int requested) const {
  const int ctx = requested > 0 ? requested : max_context;
  if (ctx <= 0) throw Error("the model has no max context; give a context length");
  if (max_context > 0 && ctx > max_context)
    throw Error("context of " + std::to_string(ctx) + " tokens is past the model's maximum of " + std::to_string(max_context));
  return ctx;
}

}  // namespace mtb
