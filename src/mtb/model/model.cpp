#include "mtb/model/model.h"

#include <cmath>

#include "mtb/core/error.h"
#include "mtb/kernels/attention.h"
#include "mtb/kernels/matmul.h"
#include "mtb/kernels/ops.h"
#include "mtb/model/weights.h"

namespace mtb {
namespace {

void linear(const Linear& l, const float* x, int T, float* y) {
  kernels::matmul(y, x, l.w.data, l.w.dtype, l.b.empty() ? nullptr : l.b.data(), T, l.out(), l.in());
}

}  // namespace

Model::Model(ModelConfig config, TensorMap tensors, const std::string& where)
    : config_(std::move(config)), tensors_(std::move(tensors)) {
  config_.validate(where);
  if (config_.rope_scaling.type == RopeScaling::Type::Yarn)
    throw Error(where + ": YaRN rope_scaling is not supported yet");
  check_tensors(config_, tensors_, where);
  auto get = [&](const std::string& name) { return tensors_.find(name)->tensor; };
  auto opt_vec = [&](const std::string& name) {
    const NamedTensor* t = tensors_.find(name);
    return t ? t->tensor.to_vector() : std::vector<float>{};
  };
  auto lin = [&](const std::string& base) {
    return Linear{get(base + ".weight"), opt_vec(base + ".bias")};
  };
  auto nrm = [&](const std::string& base) { return Norm{opt_vec(base + ".weight"), opt_vec(base + ".bias")}; };

  tok_embed_ = get(kTokenEmbedding);
  if (config_.position == PositionKind::Learned) pos_embed_ = get(kPositionEmbedding);
  lm_head_ = config_.tied_embeddings ? tok_embed_ : get(kLmHead);
  final_norm_ = nrm("model.norm");
  for (int l = 0; l < config_.n_layers; ++l) {
    const std::string p = layer_prefix(l), a = p + "self_attn.", m = p + "mlp.";
    LayerWeights w;
    w.attn_norm = nrm(p + "input_layernorm");
    w.ffn_norm = nrm(p + "post_attention_layernorm");
    if (config_.is_mla()) {
      if (config_.q_lora_rank > 0) {
        w.wq_a = lin(a + "q_a_proj");
        w.q_a_norm = nrm(a + "q_a_layernorm");
        w.wq_b = lin(a + "q_b_proj");
      } else {
        w.wq = lin(a + "q_proj");
      }
      w.wkv_a = lin(a + "kv_a_proj_with_mqa");
      w.kv_a_norm = nrm(a + "kv_a_layernorm");
      w.wkv_b = lin(a + "kv_b_proj");
    } else {
      w.wq = lin(a + "q_proj"), w.wk = lin(a + "k_proj"), w.wv = lin(a + "v_proj");
      if (config_.qk_norm) w.q_norm = nrm(a + "q_norm"), w.k_norm = nrm(a + "k_norm");
    }
    w.wo = lin(a + "o_proj");
    if (config_.ffn == FfnKind::SwiGLU) w.w_gate = lin(m + "gate_proj");
    w.w_up = lin(m + "up_proj");
    w.w_down = lin(m + "down_proj");
    layers_.push_back(std::move(w));
  }
  if (config_.position == PositionKind::RoPE) inv_freq_ = config_.rope_inv_freq();
}

void Model::norm(const Norm& n, const float* x, int T, float* out) const {
  const int d = config_.d_model;
  if (config_.norm == NormKind::RMSNorm)
    kernels::rmsnorm(out, d, x, d, n.g.data(), T, d, float(config_.norm_eps));
  else
    kernels::layernorm(out, x, n.g.data(), n.b.empty() ? nullptr : n.b.data(), T, d, float(config_.norm_eps));
}

void Model::rope_tables(int pos0, int T, std::vector<float>& cos, std::vector<float>& sin) const {
  const size_t half = inv_freq_.size();
  cos.resize(size_t(T) * half);
  sin.resize(size_t(T) * half);
  for (int t = 0; t < T; ++t)
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(pos0 + t) * inv_freq_[i];
      cos[size_t(t) * half + i] = float(std::cos(angle));
      sin[size_t(t) * half + i] = float(std::sin(angle));
    }
}

void Model::embed(const std::vector<int32_t>& ids, float* x) const {
  const int d = config_.d_model;
  const size_t row_bytes = size_t(d) * dtype_size(tok_embed_.dtype);
  for (size_t t = 0; t < ids.size(); ++t) {
    to_f32(tok_embed_.dtype, static_cast<const uint8_t*>(tok_embed_.data) + size_t(ids[t]) * row_bytes,
           x + t * d, size_t(d));
    if (!pos_embed_.empty()) {
      std::vector<float> pos(static_cast<size_t>(d));
      const size_t pos_row_bytes = size_t(d) * dtype_size(pos_embed_.dtype);
      to_f32(pos_embed_.dtype, static_cast<const uint8_t*>(pos_embed_.data) + t * pos_row_bytes, pos.data(), size_t(d));
      kernels::add(x + t * d, pos.data(), d);
    }
  }
}

// Standard attention (MHA / MQA / GQA), optional QK-norm and RoPE.
void Model::attention(const LayerWeights& w, int layer, const float* h, int T, float* out) const {
  const ModelConfig& c = config_;
  const int H = c.n_heads, KV = c.n_kv_heads, dh = c.head_dim;
  std::vector<float> q(size_t(T) * H * dh), k(size_t(T) * KV * dh), v(size_t(T) * KV * dh);  // [T, heads, dh]
  linear(w.wq, h, T, q.data());
  linear(w.wk, h, T, k.data());
  linear(w.wv, h, T, v.data());
  if (c.qk_norm) {  // per head, before RoPE
    kernels::rmsnorm(q.data(), dh, q.data(), dh, w.q_norm.g.data(), T * H, dh, float(c.norm_eps));
    kernels::rmsnorm(k.data(), dh, k.data(), dh, w.k_norm.g.data(), T * KV, dh, float(c.norm_eps));
  }
  if (c.layer_uses_rope(layer)) {
    std::vector<float> cos, sin;
    rope_tables(0, T, cos, sin);
    kernels::rope(q.data(), T, int64_t(H) * dh, H, dh, dh, cos.data(), sin.data(), c.rope_layout);
    kernels::rope(k.data(), T, int64_t(KV) * dh, KV, dh, dh, cos.data(), sin.data(), c.rope_layout);
  }
  std::vector<float> att(size_t(T) * H * dh);  // [T, H, dh]
  kernels::AttentionArgs a;
  a.n_queries = T, a.q_pos0 = 0, a.n_heads = H, a.n_kv_heads = KV, a.qk_dim = dh, a.v_dim = dh;
  a.scale = float(c.attention_scale());
  a.q = q.data(), a.q_stride = int64_t(H) * dh;
  a.k = k.data(), a.k_stride = int64_t(KV) * dh;
  a.v = v.data(), a.v_stride = int64_t(KV) * dh;
  a.out = att.data(), a.out_stride = int64_t(H) * dh;
  kernels::attention(a);
  linear(w.wo, att.data(), T, out);
}

// MLA computed the plain way: the latent is up-projected to per-head keys and values.
void Model::attention_mla(const LayerWeights& w, int layer, const float* h, int T, float* out) const {
  const ModelConfig& c = config_;
  const int H = c.n_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  const int qk = nope + rope, dv = c.v_head_dim, dc = c.kv_lora_rank;
  std::vector<float> q(size_t(T) * H * qk);  // [T, H, nope | rope]
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(size_t(T) * c.q_lora_rank);  // [T, q_lora_rank]
    linear(w.wq_a, h, T, qa.data());
    kernels::rmsnorm(qa.data(), c.q_lora_rank, qa.data(), c.q_lora_rank, w.q_a_norm.g.data(), T,
                     c.q_lora_rank, float(c.norm_eps));
    linear(w.wq_b, qa.data(), T, q.data());
  } else {
    linear(w.wq, h, T, q.data());
  }
  std::vector<float> kva(size_t(T) * (dc + rope));  // [T, latent | rope key]
  linear(w.wkv_a, h, T, kva.data());
  std::vector<float> latent(size_t(T) * dc);  // [T, dc], normalized
  kernels::rmsnorm(latent.data(), dc, kva.data(), dc + rope, w.kv_a_norm.g.data(), T, dc, float(c.norm_eps));
  if (c.layer_uses_rope(layer)) {
    std::vector<float> cos, sin;
    rope_tables(0, T, cos, sin);
    kernels::rope(q.data() + nope, T, int64_t(H) * qk, H, qk, rope, cos.data(), sin.data(), c.rope_layout);
    kernels::rope(kva.data() + dc, T, dc + rope, 1, 0, rope, cos.data(), sin.data(), c.rope_layout);
  }
  std::vector<float> kv(size_t(T) * H * (nope + dv));  // [T, H, k_nope | v]
  linear(w.wkv_b, latent.data(), T, kv.data());
  std::vector<float> k(size_t(T) * H * qk), v(size_t(T) * H * dv);  // [T, H, qk], [T, H, dv]
  for (int t = 0; t < T; ++t)
    for (int hh = 0; hh < H; ++hh) {
      const float* src = kv.data() + (size_t(t) * H + hh) * (nope + dv);
      float* kd = k.data() + (size_t(t) * H + hh) * qk;
      std::copy(src, src + nope, kd);
      std::copy(kva.data() + size_t(t) * (dc + rope) + dc, kva.data() + size_t(t) * (dc + rope) + dc + rope, kd + nope);
      std::copy(src + nope, src + nope + dv, v.data() + (size_t(t) * H + hh) * dv);
    }
  std::vector<float> att(size_t(T) * H * dv);  // [T, H, dv]
  kernels::AttentionArgs a;
  a.n_queries = T, a.q_pos0 = 0, a.n_heads = H, a.n_kv_heads = H, a.qk_dim = qk, a.v_dim = dv;
  a.scale = float(c.attention_scale());
  a.q = q.data(), a.q_stride = int64_t(H) * qk;
  a.k = k.data(), a.k_stride = int64_t(H) * qk;
  a.v = v.data(), a.v_stride = int64_t(H) * dv;
  a.out = att.data(), a.out_stride = int64_t(H) * dv;
  kernels::attention(a);
  linear(w.wo, att.data(), T, out);
}

void Model::ffn(const LayerWeights& w, const float* h, int T, float* out) const {
  const int64_t n = int64_t(T) * config_.d_ff;
  std::vector<float> up(static_cast<size_t>(n));  // [T, d_ff]
  linear(w.w_up, h, T, up.data());
  if (config_.ffn == FfnKind::SwiGLU) {
    std::vector<float> gate(static_cast<size_t>(n));  // [T, d_ff]
    linear(w.w_gate, h, T, gate.data());
    kernels::silu_mul(gate.data(), up.data(), n);
    linear(w.w_down, gate.data(), T, out);
  } else {
    kernels::gelu_tanh(up.data(), n);
    linear(w.w_down, up.data(), T, out);
  }
}

std::vector<float> Model::forward(const std::vector<int32_t>& ids) const {
  const ModelConfig& c = config_;
  const int T = int(ids.size()), d = c.d_model;
  if (T == 0) throw Error("empty token sequence");
  if (c.max_context > 0 && T > c.max_context)
    throw Error("sequence of " + std::to_string(T) + " tokens is longer than the model's context of " +
                std::to_string(c.max_context));
  for (int t = 0; t < T; ++t)
    if (ids[size_t(t)] < 0 || ids[size_t(t)] >= c.vocab)
      throw Error("token id " + std::to_string(ids[size_t(t)]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
  std::vector<float> x(size_t(T) * d), h(size_t(T) * d), y(size_t(T) * d);  // [T, d]
  embed(ids, x.data());
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = layers_[size_t(l)];
    norm(w.attn_norm, x.data(), T, h.data());
    if (c.is_mla()) attention_mla(w, l, h.data(), T, y.data());
    else attention(w, l, h.data(), T, y.data());
    kernels::add(x.data(), y.data(), int64_t(T) * d);
    norm(w.ffn_norm, x.data(), T, h.data());
    ffn(w, h.data(), T, y.data());
    kernels::add(x.data(), y.data(), int64_t(T) * d);
  }
  norm(final_norm_, x.data(), T, h.data());
  std::vector<float> logits(size_t(T) * c.vocab);  // [T, vocab]
  kernels::matmul(logits.data(), h.data(), lm_head_.data, lm_head_.dtype, nullptr, T, c.vocab, d);
  return logits;
}

}  // namespace mtb
