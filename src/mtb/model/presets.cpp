// The named model shapes of `mtb info --preset NAME`, `mtb init --preset NAME`.
#include <functional>
#include <map>

#include "mtb/core/error.h"
#include "mtb/model/config.h"

namespace mtb {
namespace {

ModelConfig llama_like(int V, int d, int L, int h, int kv, int hd, int dff, double base) {
  ModelConfig c;
  c.family = "llama";
  c.vocab = V, c.d_model = d, c.n_layers = L, c.n_heads = h, c.n_kv_heads = kv, c.head_dim = hd;
  c.d_ff = dff, c.rope_base = base, c.norm_eps = 1e-5;
  return c;
}

RopeScaling llama3_scaling(double factor) {
  RopeScaling s;
  s.type = RopeScaling::Type::Llama3;
  s.factor = factor, s.low_freq_factor = 1.0, s.high_freq_factor = 4.0, s.original_max_position = 8192;
  return s;
}

const std::map<std::string, std::function<ModelConfig()>>& table() {
  static const std::map<std::string, std::function<ModelConfig()>> t = {
      {"example-3m",  // the chapter's example: 3,283,456 parameters
       [] {
         ModelConfig c = llama_like(1000, 256, 4, 8, 2, 32, 688, 10000.0);
         c.family = "qwen3", c.qk_norm = true, c.norm_eps = 1e-6, c.max_context = 1024;
         return c;
       }},
      {"gpt2-124m",
       [] {
         ModelConfig c;
         c.family = "gpt2";
         c.vocab = 50257, c.d_model = 768, c.n_layers = 12, c.n_heads = 12, c.n_kv_heads = 12;
         c.head_dim = 64, c.d_ff = 3072, c.norm = NormKind::LayerNorm, c.norm_eps = 1e-5;
         c.ffn = FfnKind::GeluMlp, c.position = PositionKind::Learned, c.bias = BiasKind::All;
         c.tied_embeddings = true, c.max_context = 1024;
         return c;
       }},
      {"qwen3-0.6b",
       [] {
         ModelConfig c = llama_like(151936, 1024, 28, 16, 8, 128, 3072, 1e6);
         c.family = "qwen3", c.qk_norm = true, c.norm_eps = 1e-6, c.tied_embeddings = true;
         c.max_context = 40960;
         return c;
       }},
      {"llama3.2-1b",
       [] {
         ModelConfig c = llama_like(128256, 2048, 16, 32, 8, 64, 8192, 500000.0);
         c.rope_scaling = llama3_scaling(32.0), c.tied_embeddings = true, c.max_context = 131072;
         return c;
       }},
      {"llama3-8b",
       [] {
         ModelConfig c = llama_like(128256, 4096, 32, 32, 8, 128, 14336, 500000.0);
         c.max_context = 8192;
         return c;
       }},
      {"llama3-70b",
       [] {
         ModelConfig c = llama_like(128256, 8192, 80, 64, 8, 128, 28672, 500000.0);
         c.max_context = 8192;
         return c;
       }},
      {"deepseek-v3",  // MLA attention as in the chapter; MoE FFN described, not run
       [] {
         ModelConfig c;
         c.family = "deepseek_v3";
         c.vocab = 129280, c.d_model = 7168, c.n_layers = 61, c.n_heads = 128, c.n_kv_heads = 128;
         c.d_ff = 18432, c.norm_eps = 1e-6, c.rope_base = 10000.0;
         c.rope_layout = RopeLayout::Interleaved, c.attention = AttentionKind::MLA;
         c.q_lora_rank = 1536, c.kv_lora_rank = 512, c.qk_nope_head_dim = 128;
         c.qk_rope_head_dim = 64, c.v_head_dim = 128, c.max_context = 163840;
         c.rope_scaling.type = RopeScaling::Type::Yarn, c.rope_scaling.factor = 40.0;
         c.rope_scaling.original_max_position = 4096;
         c.moe = MoeSpec{3, 256, 1, 8, 2048};
         return c;
       }},
      {"mla-dense-170m",
       [] {
         ModelConfig c;
         c.family = "deepseek_v3";
         c.vocab = 32000, c.d_model = 1024, c.n_layers = 8, c.n_heads = 16, c.n_kv_heads = 16;
         c.d_ff = 3072, c.norm_eps = 1e-6, c.rope_base = 10000.0;
         c.rope_layout = RopeLayout::Interleaved, c.attention = AttentionKind::MLA;
         c.q_lora_rank = 0, c.kv_lora_rank = 512, c.qk_nope_head_dim = 128;
         c.qk_rope_head_dim = 64, c.v_head_dim = 128, c.tied_embeddings = true, c.max_context = 4096 * 2;
         return c;
       }},
  };
  return t;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, make] : table()) names.push_back(name);
  return names;
}

ModelConfig preset(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown preset '" + name + "' (known: " + known + ")");
  }
  ModelConfig c = it->second();
  c.validate("preset " + name);
  return c;
}

}  // namespace mtb
