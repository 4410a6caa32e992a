#include "mtb/model/weights.h"

#include "mtb/core/error.h"

namespace mtb {

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  std::vector<TensorSpec> t;
  const int64_t d = c.d_model, h = c.n_heads;
  auto mat = [&](const std::string& name, int64_t out, int64_t in) {
    t.push_back({name, {out, in}, TensorRole::Matrix});
  };
  auto vec = [&](const std::string& name, int64_t n) { t.push_back({name, {n}, TensorRole::Vector}); };
  auto norm = [&](const std::string& base, int64_t n) {
    vec(base + ".weight", n);
    if (c.norm == NormKind::LayerNorm) vec(base + ".bias", n);
  };
  mat(kTokenEmbedding, c.vocab, d);
  if (c.position == PositionKind::Learned) mat(kPositionEmbedding, c.max_context, d);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = layer_prefix(l);
    norm(p + "input_layernorm", d);
    const std::string a = p + "self_attn.";
    if (c.is_mla()) {
      const int64_t qk = c.qk_head_dim();
      if (c.q_lora_rank > 0) {
        mat(a + "q_a_proj.weight", c.q_lora_rank, d);
        vec(a + "q_a_layernorm.weight", c.q_lora_rank);
        mat(a + "q_b_proj.weight", h * qk, c.q_lora_rank);
      } else {
        mat(a + "q_proj.weight", h * qk, d);
      }
      mat(a + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, d);
      vec(a + "kv_a_layernorm.weight", c.kv_lora_rank);
      mat(a + "kv_b_proj.weight", h * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
      mat(a + "o_proj.weight", d, h * c.v_head_dim);
    } else {
      const int64_t q = h * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim;
      mat(a + "q_proj.weight", q, d);
      mat(a + "k_proj.weight", kv, d);
      mat(a + "v_proj.weight", kv, d);
      mat(a + "o_proj.weight", d, q);
      if (c.bias != BiasKind::None) {
        vec(a + "q_proj.bias", q);
        vec(a + "k_proj.bias", kv);
        vec(a + "v_proj.bias", kv);
      }
      if (c.bias == BiasKind::All) vec(a + "o_proj.bias", d);
      if (c.qk_norm) {
        vec(a + "q_norm.weight", c.head_dim);
        vec(a + "k_norm.weight", c.head_dim);
      }
    }
    norm(p + "post_attention_layernorm", d);
    if (c.layer_is_moe(l)) continue;  // described for planning only; check_tensors refuses it
    const std::string m = p + "mlp.";
    if (c.ffn == FfnKind::SwiGLU) {
      mat(m + "gate_proj.weight", c.d_ff, d);
      mat(m + "up_proj.weight", c.d_ff, d);
      mat(m + "down_proj.weight", d, c.d_ff);
    } else {
      mat(m + "up_proj.weight", c.d_ff, d);
      mat(m + "down_proj.weight", d, c.d_ff);
      if (c.bias == BiasKind::All) {
        vec(m + "up_proj.bias", c.d_ff);
        vec(m + "down_proj.bias", d);
      }
    }
  }
  norm("model.norm", d);
  if (!c.tied_embeddings) mat(kLmHead, c.vocab, d);
  return t;
}

void check_tensors(const ModelConfig& c, const TensorMap& tensors, const std::string& where) {
  for (int l = 0; l < c.n_layers; ++l)
    if (c.layer_is_moe(l))
      throw Error(where + ": layer " + std::to_string(l) +
                  " is a mixture-of-experts layer; mtb runs dense FFN layers only for now");
  const auto specs = expected_tensors(c);
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& s : specs) by_name[s.name] = &s;
  for (const auto& s : specs) {
    const NamedTensor* nt = tensors.find(s.name);
    if (!nt) throw Error(where + ": missing tensor '" + s.name + "' (expected shape " + shape_str(s.shape) + ")");
    if (nt->tensor.shape != s.shape)
      throw Error(nt->source + ": tensor '" + s.name + "' has shape " + shape_str(nt->tensor.shape) +
                  ", expected " + shape_str(s.shape));
  }
  for (const auto& [name, nt] : tensors.items()) {
    if (by_name.count(name)) continue;
    if (name == kLmHead && c.tied_embeddings) {  // a redundant copy, as some tied checkpoints ship
      if (nt.tensor.shape != Shape{c.vocab, c.d_model})
        throw Error(nt.source + ": tensor '" + name + "' has shape " + shape_str(nt.tensor.shape) +
                    ", expected " + shape_str({c.vocab, c.d_model}));
      continue;
    }
    throw Error(nt.source + ": unexpected tensor '" + name + "' for this config");
  }
}

}  // namespace mtb
