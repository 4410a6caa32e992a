#include "mtb/io/gguf_names.h"

#include <utility>

#include "mtb/model/weights.h"

namespace mtb {
namespace {

// Per-layer names without the .weight / .bias suffix: {GGUF, canonical after "model.layers.{i}."}.
const std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"attn_q_a", "self_attn.q_a_proj"},
    {"attn_q_a_norm", "self_attn.q_a_layernorm"},
    {"attn_q_b", "self_attn.q_b_proj"},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
    {"attn_kv_b", "self_attn.kv_b_proj"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

const std::pair<const char*, const char*> kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// Splits "name.weight" / "name.bias"; false for any other suffix.
bool split_suffix(const std::string& s, std::string* base, std::string* suffix) {
  for (const char* suf : {".weight", ".bias"}) {
    const std::string x = suf;
    if (s.size() > x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      *base = s.substr(0, s.size() - x.size());
      *suffix = x;
      return true;
    }
  }
  return false;
}

// Parses "<prefix>{digits}." at the start of s; returns the position after the dot or 0.
size_t parse_layer(const std::string& s, const std::string& prefix, int* layer) {
  if (s.compare(0, prefix.size(), prefix) != 0) return 0;
  size_t i = prefix.size();
  int64_t v = 0;
  const size_t start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - start < 9) v = v * 10 + (s[i++] - '0');
  if (i == start || i >= s.size() || s[i] != '.') return 0;
  *layer = int(v);
  return i + 1;
}

}  // namespace

std::string gguf_to_canonical(const std::string& name, int* layer) {
  *layer = -1;
  for (const auto& [g, c] : kGlobalNames)
    if (name == g) return c;
  int l = -1;
  const size_t at = parse_layer(name, "blk.", &l);
  if (!at) return "";
  std::string base, suffix;
  if (!split_suffix(name.substr(at), &base, &suffix)) return "";
  for (const auto& [g, c] : kLayerNames)
    if (base == g) {
      *layer = l;
      return layer_prefix(l) + c + suffix;
    }
  return "";
}

std::string canonical_to_gguf(const std::string& canonical) {
  for (const auto& [g, c] : kGlobalNames)
    if (canonical == c) return g;
  int l = -1;
  const size_t at = parse_layer(canonical, "model.layers.", &l);
  if (!at) return "";
  std::string base, suffix;
  if (!split_suffix(canonical.substr(at), &base, &suffix)) return "";
  for (const auto& [g, c] : kLayerNames)
    if (base == c) return "blk." + std::to_string(l) + "." + g + suffix;
  return "";
}

}  // namespace mtb
