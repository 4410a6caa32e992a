// RoPE layout changes by row permutation, and `mtb convert` between GGUF and Hugging Face.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/io/gguf.h"
#include "mtb/io/gguf_tokenizer.h"
#include "mtb/io/model_file.h"
#include "mtb/model/weights.h"

namespace mtb {
namespace fs = std::filesystem;

TensorMap set_rope_layout(ModelConfig& c, const TensorMap& in, RopeLayout target) {
  if (c.position != PositionKind::RoPE || c.rope_layout == target) {
    c.rope_layout = target;
    return in;
  }
  TensorMap out = in;
  // Within each of `heads` blocks of `block` rows, the `rot` rows from `first` on are moved:
  // rotate-half pairs row i with i + rot/2, interleaved pairs 2i with 2i + 1.
  auto permute = [&](const std::string& name, int64_t heads, int64_t block, int64_t first, int64_t rot) {
    const NamedTensor* nt = in.find(name);
    if (!nt) return;  // check_tensors reports it
    const Tensor& t = nt->tensor;
    if (t.shape.empty() || t.shape[0] != heads * block)
      throw Error(nt->source + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " +
                  std::to_string(heads * block) + " rows");
    const size_t row = t.nbytes() / size_t(t.shape[0]);
    const auto* src = static_cast<const uint8_t*>(t.data);
    std::vector<uint8_t> bytes(src, src + t.nbytes());
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < rot / 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          const int64_t inter = h * block + first + 2 * i + j, half = h * block + first + j * (rot / 2) + i;
          const int64_t to = target == RopeLayout::Interleaved ? inter : half;
          const int64_t from = target == RopeLayout::Interleaved ? half : inter;
          std::memcpy(&bytes[size_t(to) * row], src + size_t(from) * row, row);
        }
    const Tensor copy = t;
    const std::string source = nt->source;
    out.erase(name);
    out.add_owned(name, copy.dtype, copy.shape, std::move(bytes), source);
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string a = layer_prefix(l) + "self_attn.";
    if (c.is_mla()) {
      const int64_t qk = c.qk_head_dim(), rope = c.qk_rope_head_dim, nope = c.qk_nope_head_dim;
      permute(a + (c.q_lora_rank > 0 ? "q_b_proj.weight" : "q_proj.weight"), c.n_heads, qk, nope, rope);
      permute(a + "kv_a_proj_with_mqa.weight", 1, c.kv_lora_rank + rope, c.kv_lora_rank, rope);
    } else {
      const int64_t dh = c.head_dim;
      for (const char* w : {"q_proj.weight", "q_proj.bias"}) permute(a + w, c.n_heads, dh, 0, dh);
      for (const char* w : {"k_proj.weight", "k_proj.bias"}) permute(a + w, c.n_kv_heads, dh, 0, dh);
      if (c.qk_norm)
        for (const char* w : {"q_norm.weight", "k_norm.weight"}) permute(a + w, 1, dh, 0, dh);
    }
  }
  c.rope_layout = target;
  return out;
}

namespace {

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "f32") *out = DType::F32;
  else if (s == "f16") *out = DType::F16;
  else if (s == "bf16") *out = DType::BF16;
  else return false;
  return true;
}


bool is_gguf_file(const std::string& path) {
  char magic[4] = {0};
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    if (std::fread(magic, 1, 4, f) != 4) std::memset(magic, 0, 4);
    std::fclose(f);
  }
  return std::memcmp(magic, "GGUF", 4) == 0;
}

std::string hf_dir_of(const std::string& in) {
  std::error_code ec;
  const fs::path p(in);
  if (fs::is_directory(p, ec)) return in;
  if (p.filename() == "config.json" || p.extension() == ".safetensors") return p.has_parent_path() ? p.parent_path().string() : ".";
  return "";
}

// The tokenizer that goes with the model at `in`, as GGUF keys (model "none" if it has none).
GgufTokenizer input_tokenizer(const std::string& in, int64_t vocab, std::string* warning) {
  if (const std::string dir = hf_dir_of(in); !dir.empty()) return gguf_tokenizer_from_hf(dir, vocab, warning);
  if (is_gguf_file(in)) return read_gguf_tokenizer(GgufFile::open(in));
  return GgufTokenizer{};
}

}  // namespace

std::string convert_model(const std::string& in, const std::string& out, const std::string& dtype) {
  if (!dtype.empty() && dtype != "f32" && dtype != "f16" && dtype != "bf16" && dtype != "q8_0")
    throw Error("--dtype '" + dtype + "' is not one of f32, f16, bf16, q8_0");
  LoadedModel m = load_model_file(in);
  std::string warning;
  const GgufTokenizer tok = input_tokenizer(in, m.config.vocab, &warning);
  const std::string tok_note = tok.model == "none" ? ", no tokenizer" : ", tokenizer " + tok.model;
  const std::string warn_note = warning.empty() ? "" : "; warning: " + warning;
  check_tensors(m.config, m.tensors, m.where);
  // "As the input": the element type of its token embedding (a Q8_0 input becomes F32 in a
  // Hugging Face directory, which has no Q8_0).
  const DType input = m.tensors.find(kTokenEmbedding)->tensor.dtype;
  const bool to_gguf = fs::path(out).extension() == ".gguf";
  const std::string chosen = !dtype.empty()            ? dtype
                             : input == DType::F32     ? "f32"
                             : input == DType::F16     ? "f16"
                             : input == DType::Q8_0    ? (to_gguf ? "q8_0" : "f32")
                                                       : "bf16";
  if (to_gguf) {
    const GgufOutType t = chosen == "f32" ? GgufOutType::F32 : chosen == "f16" ? GgufOutType::F16
                          : chosen == "bf16" ? GgufOutType::BF16 : GgufOutType::Q8_0;
    save_gguf(out, m.config, m.tensors, t, fs::path(out).stem().string(), &tok);
    return "wrote " + out + " (GGUF, " + m.config.family + ", " + chosen + tok_note + ")" + warn_note;
  }
  DType target;
  if (!parse_dtype(chosen, &target))
    throw Error("--dtype " + chosen + " is a GGUF type; a Hugging Face directory holds f32, f16 or bf16 (or write OUT.gguf)");
  // Hugging Face's conventions: rotate-half for the Llama/Qwen families (undoing llama.cpp's
  // Q/K permutation), interleaved pairs for DeepSeek (its rope_interleave default).
  ModelConfig c = m.config;
  const bool deepseek = c.family == "deepseek_v2" || c.family == "deepseek_v3";
  TensorMap t = c.position == PositionKind::RoPE
                    ? set_rope_layout(c, m.tensors, deepseek ? RopeLayout::Interleaved : RopeLayout::RotateHalf)
                    : m.tensors;
  std::vector<std::string> names;
  for (const auto& [name, nt] : t.items()) names.push_back(name);
  for (const std::string& name : names) {
    const NamedTensor nt = *t.find(name);
    if (nt.tensor.dtype == target) continue;
    const std::vector<float> f = nt.tensor.to_vector();
    std::vector<uint8_t> bytes(f.size() * dtype_size(target));
    if (target == DType::F32) {
      std::memcpy(bytes.data(), f.data(), bytes.size());
    } else {
      auto* o = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < f.size(); ++i) o[i] = target == DType::BF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
    }
    t.erase(name);
    t.add_owned(name, target, nt.tensor.shape, std::move(bytes), nt.source);
  }
  save_hf_dir(out, c, t, target);
  // The tokenizer: a Hugging Face input's files as they are, a GGUF input's keys as files.
  auto write = [&](const char* file, const std::string& text) {
    write_file_atomic((fs::path(out) / file).string(), text.data(), text.size());
  };
  std::error_code ec;
  if (const std::string dir = hf_dir_of(in); !dir.empty()) {
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
      if (fs::is_regular_file(fs::path(dir) / file, ec) && !fs::equivalent(fs::path(dir) / file, fs::path(out) / file, ec))
        write(file, read_text_file((fs::path(dir) / file).string()));
  } else if (tok.model != "none") {
    write("tokenizer.json", gguf_tokenizer_json(tok));
    write("tokenizer_config.json", gguf_tokenizer_config_json(tok));
  }
  return "wrote " + out + " (Hugging Face " + c.family + ", " + chosen + tok_note + ")" + warn_note;
}

}  // namespace mtb
