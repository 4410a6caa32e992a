#include "mtb/tools/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace mtb {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string human_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) bytes /= 1024.0, ++u;
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else if (std::fabs(bytes - std::round(bytes)) < 0.05) std::snprintf(buf, sizeof buf, "%.0f %s", std::round(bytes), units[u]);
  else std::snprintf(buf, sizeof buf, "%.*f %s", bytes < 10 ? 2 : 1, bytes, units[u]);
  return buf;
}

namespace {

std::string attention_name(const ModelConfig& c) {
  if (c.is_mla()) return "MLA";
  if (c.n_kv_heads == c.n_heads) return "MHA";
  if (c.n_kv_heads == 1) return "MQA";
  return "GQA-" + std::to_string(c.n_kv_heads);
}

std::string position_text(const ModelConfig& c) {
  std::string s = to_string(c.position);
  if (c.position != PositionKind::RoPE) return s;
  std::ostringstream o;
  o << s << " " << to_string(c.rope_layout) << " base " << c.rope_base;
  if (c.rope_scaling.type == RopeScaling::Type::Llama3) o << " (llama3 scaling x" << c.rope_scaling.factor << ")";
  if (c.rope_scaling.type == RopeScaling::Type::Yarn) o << " (yarn scaling x" << c.rope_scaling.factor << ")";
  if (!c.nope_layers.empty()) {
    int n = 0;
    for (bool b : c.nope_layers) n += b;
    o << ", " << n << " NoPE layers";
  }
  return o.str();
}

}  // namespace

std::string describe_model(const ModelConfig& c, const std::string& name) {
  std::ostringstream o;
  o << "model: " << name << " (" << c.family << ")\n";
  o << "  vocab " << c.vocab << ", d_model " << c.d_model << ", layers " << c.n_layers << ", heads " << c.n_heads;
  if (c.is_mla()) {
    o << ", attention MLA (kv_lora_rank " << c.kv_lora_rank << ", q_lora_rank " << c.q_lora_rank << ", qk_nope "
      << c.qk_nope_head_dim << ", qk_rope " << c.qk_rope_head_dim << ", v " << c.v_head_dim << ")";
  } else {
    o << ", kv_heads " << c.n_kv_heads << " (" << attention_name(c) << "), head_dim " << c.head_dim;
  }
  o << ", d_ff " << c.d_ff << "\n";
  o << "  norm " << to_string(c.norm) << " eps " << c.norm_eps << ", ffn " << to_string(c.ffn) << ", position "
    << position_text(c) << "\n";
  o << "  QK-norm " << (c.qk_norm ? "on" : "off") << ", tied embeddings " << (c.tied_embeddings ? "yes" : "no")
    << ", biases " << to_string(c.bias) << ", max context " << c.max_context << "\n";
  if (c.moe.enabled())
    o << "  MoE FFN after " << c.moe.n_dense_layers << " dense layers: " << c.moe.n_routed_experts << " routed + "
      << c.moe.n_shared_experts << " shared experts of d_ff " << c.moe.expert_d_ff << ", " << c.moe.experts_per_token
      << " per token\n";
  const ParamCount p = count_params(c);
  o << "parameters: " << with_commas(p.total()) << "\n";
  auto row = [&](const char* label, int64_t n) {
    if (!n) return;
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %-10s %15s  (%5.1f%%)\n", label, with_commas(n).c_str(), 100.0 * n / p.total());
    o << buf;
  };
  row("embedding", p.embedding);
  row("positions", p.positions);
  row("attention", p.attention);
  row("ffn", p.ffn);
  row("norms", p.norms);
  row("lm_head", p.lm_head);
  o << "KV cache: " << with_commas(c.kv_elements_per_token_per_layer()) << " elements per token per layer"
    << (c.is_mla() ? " (latent + RoPE key)" : " (K and V)") << "\n";
  for (int bytes : {4, 2}) {
    const int64_t per = c.kv_bytes_per_token(bytes);
    o << "  " << (bytes == 4 ? "f32 " : "bf16") << ": " << with_commas(per) << " B (" << human_bytes(double(per))
      << ") per token, " << human_bytes(double(per) * c.max_context) << " at " << with_commas(c.max_context)
      << " tokens\n";
  }
  return o.str();
}

nlohmann::json describe_model_json(const ModelConfig& c, const std::string& name) {
  const ParamCount p = count_params(c);
  return {{"name", name},
          {"family", c.family},
          {"parameters",
           {{"total", p.total()}, {"embedding", p.embedding}, {"positions", p.positions}, {"attention", p.attention},
            {"ffn", p.ffn}, {"norms", p.norms}, {"lm_head", p.lm_head}}},
          {"kv_bytes_per_token", {{"f32", c.kv_bytes_per_token(4)}, {"bf16", c.kv_bytes_per_token(2)}}},
          {"max_context", c.max_context}};
}

}  // namespace mtb
