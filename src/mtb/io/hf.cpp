#include "mtb/io/hf.h"

#include <cstring>
#include <filesystem>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/io/safetensors.h"
#include "mtb/model/weights.h"

namespace mtb {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Typed access to config.json keys with errors that name the file and the key.
struct Keys {
  const json& j;
  const std::string& where;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  [[noreturn]] void bad(const char* key, const std::string& what) const {
    throw Error(where + ": key '" + key + "' " + what);
  }
  int integer(const char* key) const {
    if (!has(key)) bad(key, "is missing");
    if (!j[key].is_number_integer()) bad(key, "must be an integer");
    const auto v = j[key].get<int64_t>();
    if (v < 0 || v > (int64_t(1) << 31) - 1) bad(key, "is out of range: " + std::to_string(v));
    return int(v);
  }
  int integer(const char* key, int dflt) const { return has(key) ? integer(key) : dflt; }
  double number(const char* key, double dflt) const {
    if (!has(key)) return dflt;
    if (!j[key].is_number()) bad(key, "must be a number");
    return j[key].get<double>();
  }
  bool boolean(const char* key, bool dflt) const {
    if (!has(key)) return dflt;
    if (!j[key].is_boolean()) bad(key, "must be true or false");
    return j[key].get<bool>();
  }
  std::string string(const char* key, const std::string& dflt) const {
    if (!has(key)) return dflt;
    if (!j[key].is_string()) bad(key, "must be a string");
    return j[key].get<std::string>();
  }
};

const char* kFamilies = "llama, mistral, qwen2, qwen3, deepseek_v2, deepseek_v3, gpt2";

RopeScaling parse_rope_scaling(const json& j, const std::string& where) {
  RopeScaling s;
  const char* key = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? "rope_scaling"
                    : j.contains("rope_parameters") && !j["rope_parameters"].is_null() ? "rope_parameters"
                                                                                     : nullptr;
  if (!key) return s;
  const json& r = j[key];
  if (!r.is_object()) throw Error(where + ": key '" + key + "' must be an object");
  Keys k{r, where};
  std::string type = k.string("rope_type", k.string("type", "default"));
  if (type == "default") return s;
  if (type == "llama3") {
    s.type = RopeScaling::Type::Llama3;
    s.factor = k.number("factor", 8.0);
    s.low_freq_factor = k.number("low_freq_factor", 1.0);
    s.high_freq_factor = k.number("high_freq_factor", 4.0);
    s.original_max_position = k.integer("original_max_position_embeddings");
  } else if (type == "yarn") {
    s.type = RopeScaling::Type::Yarn;
    s.factor = k.number("factor", 1.0);
    s.original_max_position = k.integer("original_max_position_embeddings", 0);
  } else {
    throw Error(where + ": unsupported " + key + " type '" + type + "' (mtb knows default, llama3, yarn)");
  }
  return s;
}

void parse_llama_family(const json& j, const Keys& k, const std::string& type, ModelConfig& c) {
  c.vocab = k.integer("vocab_size");
  c.d_model = k.integer("hidden_size");
  c.n_layers = k.integer("num_hidden_layers");
  c.n_heads = k.integer("num_attention_heads");
  // Defaults as Hugging Face's config classes have them.
  c.n_kv_heads = k.integer("num_key_value_heads", type == "mistral" ? 8 : c.n_heads);
  c.head_dim = k.integer("head_dim", type == "qwen3" ? 128 : c.n_heads > 0 ? c.d_model / c.n_heads : 0);
  c.d_ff = k.integer("intermediate_size");
  c.norm_eps = k.number("rms_norm_eps", 1e-6);
  c.rope_base = k.number("rope_theta", 10000.0);
  c.rope_scaling = parse_rope_scaling(j, k.where);
  c.tied_embeddings = k.boolean("tie_word_embeddings", false);
  c.max_context = k.integer("max_position_embeddings", 2048);
  const std::string act = k.string("hidden_act", "silu");
  if (act != "silu") throw Error(k.where + ": hidden_act '" + act + "' is not supported (mtb's SwiGLU uses silu)");
  if (k.boolean("attention_bias", false))
    throw Error(k.where + ": attention_bias = true (biases on q, k, v and o) is not supported");
  if (k.boolean("mlp_bias", false)) throw Error(k.where + ": mlp_bias = true is not supported");
  if (type == "qwen2") c.bias = BiasKind::QKV;
  if (type == "qwen3") c.qk_norm = true;
  if (type == "mistral" || (type == "qwen2" && k.boolean("use_sliding_window", false))) {
    const int window = k.integer("sliding_window", 0);
    if (window > 0 && window < c.max_context) c.max_context = window;  // exact up to the window
  }
  // mtb extensions, ignored by Hugging Face: RoPE layout and NoPE layers.
  if (k.boolean("rope_interleave", false)) c.rope_layout = RopeLayout::Interleaved;
  if (j.contains("no_rope_layers") && !j["no_rope_layers"].is_null()) {
    const json& n = j["no_rope_layers"];
    if (!n.is_array()) throw Error(k.where + ": key 'no_rope_layers' must be a list of 0/1");
    for (const auto& v : n) {
      if (!v.is_number_integer() || (v.get<int>() != 0 && v.get<int>() != 1))
        throw Error(k.where + ": key 'no_rope_layers' must hold only 0 (NoPE) and 1 (RoPE)");
      c.nope_layers.push_back(v.get<int>() == 0);
    }
  }
}

void parse_deepseek(const json& j, const Keys& k, ModelConfig& c) {
  c.vocab = k.integer("vocab_size");
  c.d_model = k.integer("hidden_size");
  c.n_layers = k.integer("num_hidden_layers");
  c.n_heads = k.integer("num_attention_heads");
  c.n_kv_heads = c.n_heads;
  c.d_ff = k.integer("intermediate_size");
  c.norm_eps = k.number("rms_norm_eps", 1e-6);
  c.rope_base = k.number("rope_theta", 10000.0);
  c.rope_scaling = parse_rope_scaling(j, k.where);
  c.tied_embeddings = k.boolean("tie_word_embeddings", false);
  c.max_context = k.integer("max_position_embeddings", 2048);
  c.attention = AttentionKind::MLA;
  c.q_lora_rank = k.integer("q_lora_rank", 0);
  c.kv_lora_rank = k.integer("kv_lora_rank");
  c.qk_nope_head_dim = k.integer("qk_nope_head_dim");
  c.qk_rope_head_dim = k.integer("qk_rope_head_dim");
  c.v_head_dim = k.integer("v_head_dim");
  c.rope_layout = k.boolean("rope_interleave", true) ? RopeLayout::Interleaved : RopeLayout::RotateHalf;
  if (k.integer("moe_layer_freq", 1) != 1) throw Error(k.where + ": moe_layer_freq other than 1 is not supported");
  c.moe.n_routed_experts = k.integer("n_routed_experts", 0);
  if (c.moe.enabled()) {
    c.moe.n_dense_layers = k.integer("first_k_dense_replace", 0);
    c.moe.n_shared_experts = k.integer("n_shared_experts", 0);
    c.moe.experts_per_token = k.integer("num_experts_per_tok");
    c.moe.expert_d_ff = k.integer("moe_intermediate_size");
    if (c.moe.n_dense_layers >= c.n_layers) c.moe = MoeSpec{};  // every layer dense
  }
  const std::string act = k.string("hidden_act", "silu");
  if (act != "silu") throw Error(k.where + ": hidden_act '" + act + "' is not supported");
}

void parse_gpt2(const Keys& k, ModelConfig& c) {
  c.vocab = k.integer("vocab_size");
  c.d_model = k.integer("n_embd");
  c.n_layers = k.integer("n_layer");
  c.n_heads = k.integer("n_head");
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  if (c.n_heads > 0 && c.d_model % c.n_heads)
    throw Error(k.where + ": n_embd (" + std::to_string(c.d_model) + ") is not divisible by n_head (" +
                std::to_string(c.n_heads) + ")");
  c.d_ff = k.integer("n_inner", 4 * c.d_model);
  c.max_context = k.integer("n_positions");
  c.norm = NormKind::LayerNorm;
  c.norm_eps = k.number("layer_norm_epsilon", 1e-5);
  c.ffn = FfnKind::GeluMlp;
  c.position = PositionKind::Learned;
  c.bias = BiasKind::All;
  c.tied_embeddings = k.boolean("tie_word_embeddings", true);
  const std::string act = k.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw Error(k.where + ": activation_function '" + act + "' is not supported (mtb's GPT-2 uses gelu_new)");
}

}  // namespace

ModelConfig config_from_hf_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": not a JSON object");
  Keys k{j, where};
  if (!k.has("model_type")) throw Error(where + ": missing key 'model_type'");
  const std::string type = k.string("model_type", "");
  ModelConfig c;
  c.family = type;
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3") parse_llama_family(j, k, type, c);
  else if (type == "deepseek_v2" || type == "deepseek_v3") parse_deepseek(j, k, c);
  else if (type == "gpt2") parse_gpt2(k, c);
  else throw Error(where + ": unknown model_type '" + type + "' (supported: " + kFamilies + ")");
  // Special token ids (an int, or a list of ints for eos).
  c.bos_id = j.contains("bos_token_id") && j["bos_token_id"].is_number_integer() ? j["bos_token_id"].get<int>() : -1;
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_ids.push_back(e.get<int32_t>());
    else if (e.is_array())
      for (const auto& v : e)
        if (v.is_number_integer()) c.eos_ids.push_back(v.get<int32_t>());
  }
  c.validate(where);
  return c;
}

ModelConfig read_hf_config(const std::string& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw Error(path + ": invalid JSON: " + std::string(e.what()).substr(0, 200));
  }
  return config_from_hf_json(j, path);
}

json config_to_hf_json(const ModelConfig& c, DType dtype) {
  const std::string& f = c.family;
  auto refuse = [&](const std::string& why) {
    throw Error("model_type '" + f + "' cannot express this config: " + why);
  };
  json j;
  j["model_type"] = f;
  j["torch_dtype"] = dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
  j["vocab_size"] = c.vocab;
  j["tie_word_embeddings"] = c.tied_embeddings;
  if (c.bos_id >= 0) j["bos_token_id"] = c.bos_id;
  if (c.eos_ids.size() == 1) j["eos_token_id"] = c.eos_ids[0];
  else if (!c.eos_ids.empty()) j["eos_token_id"] = c.eos_ids;
  if (f == "gpt2") {
    if (c.norm != NormKind::LayerNorm || c.ffn != FfnKind::GeluMlp || c.position != PositionKind::Learned ||
        c.bias != BiasKind::All || c.n_kv_heads != c.n_heads || c.head_dim * c.n_heads != c.d_model)
      refuse("GPT-2 is LayerNorm, GELU MLP, learned positions, biases everywhere, MHA with head_dim = d/heads");
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_embd"] = c.d_model, j["n_layer"] = c.n_layers, j["n_head"] = c.n_heads;
    j["n_inner"] = c.d_ff, j["n_positions"] = c.max_context, j["n_ctx"] = c.max_context;
    j["layer_norm_epsilon"] = c.norm_eps, j["activation_function"] = "gelu_new";
    return j;
  }
  if (c.norm != NormKind::RMSNorm || c.ffn != FfnKind::SwiGLU || c.position != PositionKind::RoPE)
    refuse("this family is RMSNorm, SwiGLU and RoPE");
  j["hidden_size"] = c.d_model, j["num_hidden_layers"] = c.n_layers, j["num_attention_heads"] = c.n_heads;
  j["intermediate_size"] = c.d_ff, j["rms_norm_eps"] = c.norm_eps, j["rope_theta"] = c.rope_base;
  j["max_position_embeddings"] = c.max_context, j["hidden_act"] = "silu";
  if (c.rope_scaling.type == RopeScaling::Type::Llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  } else if (c.rope_scaling.type == RopeScaling::Type::Yarn) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", c.rope_scaling.factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  }
  if (f == "deepseek_v2" || f == "deepseek_v3") {
    if (!c.is_mla()) refuse("DeepSeek attention is MLA");
    j["architectures"] = {f == "deepseek_v2" ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM"};
    j["num_key_value_heads"] = c.n_heads;
    j["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
    j["kv_lora_rank"] = c.kv_lora_rank, j["qk_nope_head_dim"] = c.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim, j["v_head_dim"] = c.v_head_dim;
    j["rope_interleave"] = c.rope_layout == RopeLayout::Interleaved;
    j["first_k_dense_replace"] = c.moe.enabled() ? c.moe.n_dense_layers : c.n_layers;
    j["n_routed_experts"] = c.moe.enabled() ? json(c.moe.n_routed_experts) : json(nullptr);
    j["n_shared_experts"] = c.moe.enabled() ? json(c.moe.n_shared_experts) : json(nullptr);
    j["num_experts_per_tok"] = c.moe.enabled() ? json(c.moe.experts_per_token) : json(nullptr);
    j["moe_intermediate_size"] = c.moe.enabled() ? c.moe.expert_d_ff : c.d_ff;
    j["moe_layer_freq"] = 1, j["attention_bias"] = false;
    return j;
  }
  if (c.is_mla()) refuse("MLA is written as deepseek_v2 or deepseek_v3");
  if (f != "llama" && f != "mistral" && f != "qwen2" && f != "qwen3")
    throw Error("unknown model_type '" + f + "' (supported: " + kFamilies + ")");
  if ((f == "qwen2") != (c.bias == BiasKind::QKV)) refuse("only qwen2 has (and always has) q/k/v biases");
  if (c.bias == BiasKind::All) refuse("biases everywhere are GPT-2's");
  if ((f == "qwen3") != c.qk_norm) refuse("QK-norm is qwen3's (and qwen3 always has it)");
  static const std::map<std::string, std::string> arch = {{"llama", "LlamaForCausalLM"},
                                                          {"mistral", "MistralForCausalLM"},
                                                          {"qwen2", "Qwen2ForCausalLM"},
                                                          {"qwen3", "Qwen3ForCausalLM"}};
  j["architectures"] = {arch.at(f)};
  j["num_key_value_heads"] = c.n_kv_heads, j["head_dim"] = c.head_dim, j["attention_bias"] = false;
  if (f == "mistral") j["sliding_window"] = nullptr;
  if (c.rope_layout == RopeLayout::Interleaved) j["rope_interleave"] = true;  // mtb extension
  if (!c.nope_layers.empty()) {                                                // mtb extension
    json n = json::array();
    for (bool nope : c.nope_layers) n.push_back(nope ? 0 : 1);
    j["no_rope_layers"] = n;
  }
  return j;
}

namespace {

// Bytes of a [rows, cols] matrix transposed to [cols, rows], any element size.
std::vector<uint8_t> transpose_bytes(const Tensor& t) {
  const size_t esz = dtype_size(t.dtype), rows = size_t(t.shape[0]), cols = size_t(t.shape[1]);
  std::vector<uint8_t> out(t.nbytes());
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) std::memcpy(&out[(c * rows + r) * esz], &src[(r * cols + c) * esz], esz);
  return out;
}

// GPT-2 names (with or without the "transformer." prefix) and Conv1D [in, out] weights
// -> canonical names and [out, in]; c_attn is split into q, k, v.
TensorMap gpt2_to_canonical(const TensorMap& in, const ModelConfig& c) {
  TensorMap out;
  for (const auto& [raw, nt] : in.items()) {
    std::string name = raw.rfind("transformer.", 0) == 0 ? raw.substr(12) : raw;
    const Tensor& t = nt.tensor;
    auto fail_shape = [&](const Shape& want) {
      throw Error(nt.source + ": tensor '" + raw + "' has shape " + shape_str(t.shape) + ", expected " +
                  shape_str(want));
    };
    if (name == "wte.weight") { out.add(kTokenEmbedding, t, nt.source); continue; }
    if (name == "wpe.weight") { out.add(kPositionEmbedding, t, nt.source); continue; }
    if (name == "lm_head.weight") { out.add(kLmHead, t, nt.source); continue; }
    if (name == "ln_f.weight") { out.add(kFinalNorm, t, nt.source); continue; }
    if (name == "ln_f.bias") { out.add(kFinalNormBias, t, nt.source); continue; }
    int layer = -1;
    char rest[128] = {0};
    if (std::sscanf(name.c_str(), "h.%d.%127s", &layer, rest) != 2 || layer < 0) {
      out.add(raw, t, nt.source);  // left for check_tensors to report
      continue;
    }
    const std::string r = rest, p = layer_prefix(layer);
    if (r == "attn.bias" || r == "attn.masked_bias") continue;  // causal-mask buffers, not weights
    static const std::map<std::string, std::string> direct = {
        {"ln_1.weight", "input_layernorm.weight"}, {"ln_1.bias", "input_layernorm.bias"},
        {"ln_2.weight", "post_attention_layernorm.weight"}, {"ln_2.bias", "post_attention_layernorm.bias"},
        {"attn.c_proj.bias", "self_attn.o_proj.bias"}, {"mlp.c_fc.bias", "mlp.up_proj.bias"},
        {"mlp.c_proj.bias", "mlp.down_proj.bias"}};
    static const std::map<std::string, std::string> conv = {{"attn.c_proj.weight", "self_attn.o_proj.weight"},
                                                            {"mlp.c_fc.weight", "mlp.up_proj.weight"},
                                                            {"mlp.c_proj.weight", "mlp.down_proj.weight"}};
    if (auto it = direct.find(r); it != direct.end()) {
      out.add(p + it->second, t, nt.source);
    } else if (auto it2 = conv.find(r); it2 != conv.end()) {
      if (t.shape.size() != 2) fail_shape({c.d_model, c.d_model});
      out.add_owned(p + it2->second, t.dtype, {t.shape[1], t.shape[0]}, transpose_bytes(t), nt.source);
    } else if (r == "attn.c_attn.weight") {
      const int64_t d = c.d_model;
      if (t.shape != Shape{d, 3 * d}) fail_shape({d, 3 * d});
      const std::vector<uint8_t> all = transpose_bytes(t);  // [3d, d]: q rows, k rows, v rows
      const size_t part = size_t(d * d) * dtype_size(t.dtype);
      const char* names[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
      for (int i = 0; i < 3; ++i)
        out.add_owned(p + names[i], t.dtype, {d, d}, std::vector<uint8_t>(all.begin() + i * part, all.begin() + (i + 1) * part), nt.source);
    } else if (r == "attn.c_attn.bias") {
      const int64_t d = c.d_model;
      if (t.shape != Shape{3 * d}) fail_shape({3 * d});
      const size_t part = size_t(d) * dtype_size(t.dtype);
      const uint8_t* b = static_cast<const uint8_t*>(t.data);
      const char* names[3] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"};
      for (int i = 0; i < 3; ++i)
        out.add_owned(p + names[i], t.dtype, {d}, std::vector<uint8_t>(b + i * part, b + (i + 1) * part), nt.source);
    } else {
      out.add(raw, t, nt.source);
    }
  }
  return out;
}

}  // namespace

LoadedModel load_hf_dir(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) throw Error(dir + ": no config.json (not a Hugging Face model directory)");
  LoadedModel m;
  m.where = dir;
  m.config = read_hf_config(config_path);
  TensorMap raw;
  read_safetensors_dir(dir, raw);
  if (m.config.family == "gpt2") {
    m.tensors = gpt2_to_canonical(raw, m.config);
    m.tensors.keep_alive(std::make_shared<TensorMap>(std::move(raw)));
  } else {
    m.tensors = std::move(raw);
    // Ignore the rotary inverse-frequency buffers some older Llama checkpoints carry.
    std::vector<std::string> drop;
    for (const auto& [name, nt] : m.tensors.items())
      if (name.ends_with("rotary_emb.inv_freq")) drop.push_back(name);
    for (const auto& n : drop) m.tensors.erase(n);
  }
  return m;
}

void save_hf_dir(const std::string& dir, const ModelConfig& c, const TensorMap& tensors, DType dtype,
                 size_t max_shard_bytes) {
  const json cfg = config_to_hf_json(c, dtype);
  fs::create_directories(dir);
  NamedTensors out;
  TensorMap owned;  // GPT-2's re-laid-out tensors live here while writing
  auto get = [&](const std::string& name) -> const Tensor& {
    const NamedTensor* nt = tensors.find(name);
    if (!nt) throw Error("save: missing tensor '" + name + "'");
    return nt->tensor;
  };
  for (const TensorSpec& s : expected_tensors(c)) {
    const Tensor& t = get(s.name);
    if (c.family != "gpt2") {
      out.emplace_back(s.name, t);
      continue;
    }
    // GPT-2 layout: Conv1D [in, out], fused c_attn, "transformer." names.
    std::string n = s.name;
    auto replace = [&](const std::string& from, const std::string& to) {
      const size_t pos = n.find(from);
      if (pos != std::string::npos) n.replace(pos, from.size(), to);
    };
    replace("model.layers.", "transformer.h.");
    replace("model.embed_tokens", "transformer.wte");
    replace("model.embed_positions", "transformer.wpe");
    replace("model.norm", "transformer.ln_f");
    replace("input_layernorm", "ln_1");
    replace("post_attention_layernorm", "ln_2");
    replace("self_attn.o_proj", "attn.c_proj");
    replace("mlp.up_proj", "mlp.c_fc");
    replace("mlp.down_proj", "mlp.c_proj");
    const bool is_q = n.find("self_attn.q_proj") != std::string::npos;
    if (n.find("self_attn.k_proj") != std::string::npos || n.find("self_attn.v_proj") != std::string::npos) continue;
    if (is_q) {  // fuse q, k, v into c_attn
      const std::string base = s.name.substr(0, s.name.find("q_proj"));
      const bool weight = n.ends_with(".weight");
      replace("self_attn.q_proj", "attn.c_attn");
      const Tensor* parts[3] = {&get(base + "q_proj" + (weight ? ".weight" : ".bias")),
                                &get(base + "k_proj" + (weight ? ".weight" : ".bias")),
                                &get(base + "v_proj" + (weight ? ".weight" : ".bias"))};
      std::vector<uint8_t> cat;
      for (const Tensor* p : parts)
        cat.insert(cat.end(), static_cast<const uint8_t*>(p->data), static_cast<const uint8_t*>(p->data) + p->nbytes());
      if (weight) {  // [3d, d] -> Conv1D [d, 3d]
        const int64_t d = c.d_model;
        Tensor stacked{t.dtype, {3 * d, d}, cat.data()};
        out.emplace_back(n, owned.add_owned(n, t.dtype, {d, 3 * d}, transpose_bytes(stacked), "save"));
      } else {
        out.emplace_back(n, owned.add_owned(n, t.dtype, {3 * int64_t(c.d_model)}, std::move(cat), "save"));
      }
      continue;
    }
    if (s.role == TensorRole::Matrix && n.find("transformer.h.") == 0)
      out.emplace_back(n, owned.add_owned(n, t.dtype, {t.shape[1], t.shape[0]}, transpose_bytes(t), "save"));
    else
      out.emplace_back(n, t);
  }
  write_safetensors_dir(dir, out, max_shard_bytes);
  const std::string text = cfg.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "config.json").string(), text.data(), text.size());
}

}  // namespace mtb
