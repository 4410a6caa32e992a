// GGUF writing: metadata and tensor layout as llama.cpp's converter produces them, Q8_0
// quantization as ggml's reference quantizer does it.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "mtb/core/error.h"
#include "mtb/io/gguf.h"
#include "mtb/io/gguf_names.h"
#include "mtb/io/gguf_tokenizer.h"
#include "mtb/model/weights.h"

namespace mtb {

void quantize_q8_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
  }
}

void dequantize_q8_0(const uint8_t* in, float* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 34, out += 32) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = f16_to_f32(dh);
    for (int j = 0; j < 32; ++j) out[j] = float(int8_t(in[2 + j])) * d;
  }
}

namespace {

// Little-endian metadata and tensor-info bytes.
struct Header {
  std::string buf;
  uint64_t n_kv = 0;

  void raw(const void* p, size_t n) { buf.append(static_cast<const char*>(p), n); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    buf += s;
  }
  void kv_u32(const std::string& key, int64_t v) {
    if (v < 0 || v > int64_t(UINT32_MAX)) throw Error("save_gguf: value of '" + key + "' out of range");
    str(key), u32(uint32_t(GgufType::U32)), u32(uint32_t(v)), ++n_kv;
  }
  void kv_f32(const std::string& key, double v) {
    const float f = float(v);
    str(key), u32(uint32_t(GgufType::F32)), raw(&f, 4), ++n_kv;
  }
  void kv_str(const std::string& key, const std::string& v) { str(key), u32(uint32_t(GgufType::STRING)), str(v), ++n_kv; }
  void kv_bool(const std::string& key, bool v) {
    const uint8_t b = v ? 1 : 0;
    str(key), u32(uint32_t(GgufType::BOOL)), raw(&b, 1), ++n_kv;
  }
  void kv_strs(const std::string& key, const std::vector<std::string>& v) {
    str(key), u32(uint32_t(GgufType::ARRAY)), u32(uint32_t(GgufType::STRING)), u64(v.size());
    for (const std::string& s : v) str(s);
    ++n_kv;
  }
  template <class T>
  void kv_array(const std::string& key, GgufType elem, const std::vector<T>& v) {
    str(key), u32(uint32_t(GgufType::ARRAY)), u32(uint32_t(elem)), u64(v.size());
    raw(v.data(), v.size() * sizeof(T));
    ++n_kv;
  }
};

// The tokenizer keys, as llama.cpp's converter writes them.
void write_tokenizer(Header& h, const GgufTokenizer* t, int64_t vocab, const std::string& path) {
  if (!t || t->model == "none") {
    h.kv_str("tokenizer.ggml.model", "none");
    if (t && !t->chat_template.empty()) h.kv_str("tokenizer.chat_template", t->chat_template);
    return;
  }
  if (int64_t(t->tokens.size()) != vocab)
    throw Error(path + ": the tokenizer has " + std::to_string(t->tokens.size()) + " tokens but the model's vocab is " +
                std::to_string(vocab));
  h.kv_str("tokenizer.ggml.model", t->model);
  if (t->model == "gpt2") h.kv_str("tokenizer.ggml.pre", t->pre);
  h.kv_strs("tokenizer.ggml.tokens", t->tokens);
  if (t->model == "llama") h.kv_array("tokenizer.ggml.scores", GgufType::F32, t->scores);
  h.kv_array("tokenizer.ggml.token_type", GgufType::I32, t->token_type);
  if (!t->merges.empty()) h.kv_strs("tokenizer.ggml.merges", t->merges);
  if (t->bos >= 0) h.kv_u32("tokenizer.ggml.bos_token_id", t->bos);
  if (t->eos >= 0) h.kv_u32("tokenizer.ggml.eos_token_id", t->eos);
  if (t->unk >= 0) h.kv_u32("tokenizer.ggml.unknown_token_id", t->unk);
  if (t->pad >= 0) h.kv_u32("tokenizer.ggml.padding_token_id", t->pad);
  h.kv_bool("tokenizer.ggml.add_bos_token", t->add_bos);
  h.kv_bool("tokenizer.ggml.add_eos_token", t->add_eos);
  if (t->model == "llama") h.kv_bool("tokenizer.ggml.add_space_prefix", t->add_space_prefix);
  if (!t->chat_template.empty()) h.kv_str("tokenizer.chat_template", t->chat_template);
}

struct OutTensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order
  GgmlType type;
  Tensor src;  // row-major source, any float dtype, numel = prod(ne)
  uint64_t offset = 0, nbytes = 0;
};

uint64_t type_bytes(GgmlType t, int64_t numel) {
  switch (t) {
    case GgmlType::F32: return uint64_t(numel) * 4;
    case GgmlType::F16: case GgmlType::BF16: return uint64_t(numel) * 2;
    case GgmlType::Q8_0: return uint64_t(numel) / 32 * 34;
  }
  return 0;
}

// The output file, written through a temporary and a rename, in 32 MiB writes at 32 MiB
// offsets: the page cache then holds the file in large folios, so mapping it right after
// (convert, then run) takes a few thousand page faults instead of tens of thousands.
class Out {
 public:
  explicit Out(const std::string& path) : path_(path), tmp_(path + ".tmp") {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) throw Error(path + ": cannot write: " + std::strerror(errno));
    buf_.reserve(kChunk);
  }
  ~Out() {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  void write(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    pos_ += n;
    while (n > 0) {
      const size_t take = std::min(n, kChunk - buf_.size());
      buf_.insert(buf_.end(), b, b + take);
      b += take, n -= take;
      if (buf_.size() == kChunk) flush();
    }
  }
  void pad(uint64_t align) {
    static const char zeros[64] = {0};
    while (pos_ % align) write(zeros, size_t(std::min<uint64_t>(align - pos_ % align, sizeof zeros)));
  }
  void finish() {
    flush();
    bool ok = std::fflush(f_) == 0;
    ok = fsync(fileno(f_)) == 0 && ok;
    ok = std::fclose(f_) == 0 && ok;
    f_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::remove(tmp_.c_str());
      throw Error(path_ + ": write failed: " + std::strerror(errno));
    }
  }
  uint64_t pos() const { return pos_; }

 private:
  static constexpr size_t kChunk = size_t(32) << 20;
  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
      throw Error(path_ + ": write failed: " + std::strerror(errno));
    buf_.clear();
  }
  std::string path_, tmp_;
  FILE* f_ = nullptr;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buf_;
};

// Streams one tensor's data in `t.type`, converting from its source in chunks of rows.
void write_tensor(Out& out, const OutTensor& t) {
  const DType sd = t.src.dtype;
  const bool same = (t.type == GgmlType::F32 && sd == DType::F32) || (t.type == GgmlType::F16 && sd == DType::F16) ||
                    (t.type == GgmlType::BF16 && sd == DType::BF16) || (t.type == GgmlType::Q8_0 && sd == DType::Q8_0);
  if (same) {
    out.write(t.src.data, t.src.nbytes());
    return;
  }
  const int64_t numel = t.src.numel(), row = t.ne[0];
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 20) / row) * row;
  std::vector<float> f;
  std::vector<uint8_t> bytes;
  const auto* src = static_cast<const uint8_t*>(t.src.data);
  for (int64_t at = 0; at < numel; at += chunk) {
    const int64_t n = std::min(chunk, numel - at);
    f.resize(size_t(n));
    to_f32(sd, src + dtype_bytes(sd, at), f.data(), size_t(n));
    bytes.resize(size_t(type_bytes(t.type, n)));
    if (t.type == GgmlType::F32) {
      std::memcpy(bytes.data(), f.data(), bytes.size());
    } else if (t.type == GgmlType::Q8_0) {
      quantize_q8_0(f.data(), bytes.data(), n);
    } else {
      auto* o = reinterpret_cast<uint16_t*>(bytes.data());
      for (int64_t i = 0; i < n; ++i) o[i] = t.type == GgmlType::BF16 ? f32_to_bf16(f[size_t(i)]) : f32_to_f16(f[size_t(i)]);
    }
    out.write(bytes.data(), bytes.size());
  }
}

std::string gguf_arch(const ModelConfig& c) {
  const std::string& f = c.family;
  if (f == "llama" || f == "mistral") return "llama";
  if (f == "qwen2" || f == "qwen3") return f;
  if (f == "deepseek_v2" || f == "deepseek_v3") return "deepseek2";
  throw Error("GGUF: model_type '" + f +
              "' cannot be written as GGUF (mtb writes llama, mistral, qwen2, qwen3, deepseek_v2, deepseek_v3)");
}

}  // namespace

void save_gguf(const std::string& path, const ModelConfig& config, const TensorMap& tensors, GgufOutType type,
               const std::string& name, const GgufTokenizer* tokenizer) {
  config.validate(path);
  const std::string arch = gguf_arch(config);
  auto refuse = [&](const std::string& why) { throw Error(path + ": GGUF (" + arch + ") cannot express this model: " + why); };
  if (config.norm != NormKind::RMSNorm || config.ffn != FfnKind::SwiGLU || config.position != PositionKind::RoPE)
    refuse("it needs RMSNorm, SwiGLU and RoPE");
  if (!config.nope_layers.empty()) refuse("NoPE layers have no GGUF key");
  if (config.moe.enabled()) refuse("mixture-of-experts layers are not written yet");
  if (config.rope_scaling.type == RopeScaling::Type::Yarn) refuse("YaRN RoPE scaling is not written yet");
  if (config.rope_scaling.type == RopeScaling::Type::Llama3 && arch != "llama")
    refuse("Llama 3 RoPE scaling (rope_freqs) is written for arch llama only");
  if ((arch == "qwen2") != (config.bias == BiasKind::QKV)) refuse("q/k/v biases are qwen2's (and qwen2 always has them)");
  if (config.bias == BiasKind::All) refuse("biases on every projection");
  if ((arch == "qwen3") != config.qk_norm) refuse("QK-norm is qwen3's (and qwen3 always has it)");
  check_tensors(config, tensors, path);

  // llama.cpp's RoPE convention for the architecture: adjacent pairs for llama and
  // deepseek2, halves for the Qwens. Rows are permuted into it (llama.cpp's converter
  // does the same for Llama's Q and K).
  ModelConfig c = config;
  const TensorMap t = set_rope_layout(
      c, tensors, arch == "llama" || arch == "deepseek2" ? RopeLayout::Interleaved : RopeLayout::RotateHalf);

  const GgmlType mat = type == GgufOutType::F32    ? GgmlType::F32
                       : type == GgufOutType::F16  ? GgmlType::F16
                       : type == GgufOutType::BF16 ? GgmlType::BF16
                                                   : GgmlType::Q8_0;
  std::vector<OutTensor> outs;
  TensorMap owned;  // re-laid-out tensors (MLA's k_b / v_b, RoPE factors)
  auto push = [&](const std::string& gname, const Tensor& src) {
    OutTensor o;
    o.name = gname;
    o.ne.assign(src.shape.rbegin(), src.shape.rend());
    o.src = src;
    o.type = src.shape.size() == 1 ? GgmlType::F32 : mat;
    if (o.type == GgmlType::Q8_0 && o.ne[0] % 32) o.type = GgmlType::F16;  // as llama.cpp falls back
    outs.push_back(std::move(o));
  };
  for (const TensorSpec& s : expected_tensors(c)) {
    const Tensor& src = t.find(s.name)->tensor;
    if (c.is_mla() && s.name.ends_with("self_attn.kv_b_proj.weight")) {
      // Split absorbed form: k_b [H, kv_lora, nope] (k transposed), v_b [H, v, kv_lora].
      const int64_t H = c.n_heads, nope = c.qk_nope_head_dim, dv = c.v_head_dim, dc = c.kv_lora_rank;
      const std::vector<float> kv = src.to_vector();  // [H, nope + v, dc]
      std::vector<float> k(size_t(H * dc * nope)), v(size_t(H * dv * dc));
      for (int64_t h = 0; h < H; ++h) {
        const float* head = kv.data() + h * (nope + dv) * dc;
        for (int64_t j = 0; j < nope; ++j)
          for (int64_t x = 0; x < dc; ++x) k[size_t((h * dc + x) * nope + j)] = head[j * dc + x];
        std::copy(head + nope * dc, head + (nope + dv) * dc, v.begin() + h * dv * dc);
      }
      const std::string g = canonical_to_gguf(s.name);  // blk.N.attn_kv_b.weight
      const std::string base = g.substr(0, g.size() - std::string("attn_kv_b.weight").size());
      const std::string kn = base + "attn_k_b.weight", vn = base + "attn_v_b.weight";
      // Widened to F32 to re-lay out; BF16 / F16 values come back exactly when written as such.
      push(kn, owned.add_owned_f32(kn, {H, dc, nope}, std::move(k), "save"));
      push(vn, owned.add_owned_f32(vn, {H, dv, dc}, std::move(v), "save"));
      continue;
    }
    const std::string g = canonical_to_gguf(s.name);
    if (g.empty()) refuse("tensor '" + s.name + "' has no GGUF name");
    push(g, src);
  }
  if (c.rope_scaling.type == RopeScaling::Type::Llama3) {  // llama.cpp divides theta_i by factor_i
    ModelConfig plain = c;
    plain.rope_scaling = RopeScaling{};
    const std::vector<double> a = plain.rope_inv_freq(), b = c.rope_inv_freq();
    std::vector<float> factors(a.size());
    for (size_t i = 0; i < a.size(); ++i) factors[i] = float(a[i] / b[i]);
    push("rope_freqs.weight", owned.add_owned_f32("rope_freqs.weight", {int64_t(a.size())}, std::move(factors), "save"));
  }

  // Metadata, as llama.cpp's converter writes it for these architectures.
  Header h;
  bool quantized = false;
  for (const OutTensor& o : outs) quantized = quantized || o.type == GgmlType::Q8_0;
  const uint32_t file_type = type == GgufOutType::F32 ? 0 : type == GgufOutType::F16 ? 1 : type == GgufOutType::BF16 ? 32 : 7;
  const std::string A = arch + ".";
  h.kv_str("general.architecture", arch);
  h.kv_str("general.name", name.empty() ? "mtb-" + c.family : name);
  h.kv_u32("general.file_type", file_type);
  if (quantized) h.kv_u32("general.quantization_version", 2);
  h.kv_u32(A + "context_length", c.max_context > 0 ? c.max_context : 2048);
  h.kv_u32(A + "embedding_length", c.d_model);
  h.kv_u32(A + "block_count", c.n_layers);
  h.kv_u32(A + "feed_forward_length", c.d_ff);
  h.kv_u32(A + "attention.head_count", c.n_heads);
  h.kv_u32(A + "attention.head_count_kv", c.is_mla() ? 1 : c.n_kv_heads);
  h.kv_f32(A + "rope.freq_base", c.rope_base);
  h.kv_f32(A + "attention.layer_norm_rms_epsilon", c.norm_eps);
  h.kv_u32(A + "vocab_size", c.vocab);
  if (c.is_mla()) {
    h.kv_u32(A + "attention.key_length", c.kv_lora_rank + c.qk_rope_head_dim);
    h.kv_u32(A + "attention.value_length", c.kv_lora_rank);
    h.kv_u32(A + "attention.key_length_mla", c.qk_nope_head_dim + c.qk_rope_head_dim);
    h.kv_u32(A + "attention.value_length_mla", c.v_head_dim);
    h.kv_u32(A + "attention.kv_lora_rank", c.kv_lora_rank);
    h.kv_u32(A + "attention.q_lora_rank", c.q_lora_rank);
    h.kv_u32(A + "rope.dimension_count", c.qk_rope_head_dim);
    h.kv_u32(A + "leading_dense_block_count", c.n_layers);  // all dense: no expert keys
    h.kv_u32(A + "expert_feed_forward_length", c.d_ff);
    h.kv_u32(A + "expert_shared_count", 0);
  } else {
    h.kv_u32(A + "attention.key_length", c.head_dim);
    h.kv_u32(A + "attention.value_length", c.head_dim);
    h.kv_u32(A + "rope.dimension_count", c.head_dim);
  }
  if (c.rope_scaling.type == RopeScaling::Type::Llama3)  // read by mtb's fit; harmless to llama.cpp
    h.kv_u32(A + "rope.scaling.original_context_length", c.rope_scaling.original_max_position);
  write_tokenizer(h, tokenizer, c.vocab, path);
  h.kv_str("mtb.hf_model_type", c.family);  // so GGUF -> Hugging Face restores the family

  // Tensor infos, then the data, each tensor aligned to 32 bytes.
  constexpr uint64_t kAlign = 32;
  uint64_t offset = 0;
  Header infos;
  for (OutTensor& o : outs) {
    o.offset = offset;
    o.nbytes = type_bytes(o.type, o.src.numel());
    offset += (o.nbytes + kAlign - 1) / kAlign * kAlign;
    infos.str(o.name);
    infos.u32(uint32_t(o.ne.size()));
    for (int64_t d : o.ne) infos.u64(uint64_t(d));
    infos.u32(uint32_t(o.type));
    infos.u64(o.offset);
  }
  Out out(path);
  out.write("GGUF", 4);
  const uint32_t version = 3;
  const uint64_t counts[2] = {outs.size(), h.n_kv};
  out.write(&version, 4);
  out.write(counts, 16);
  out.write(h.buf.data(), h.buf.size());
  out.write(infos.buf.data(), infos.buf.size());
  out.pad(kAlign);
  const uint64_t data_start = out.pos();
  for (const OutTensor& o : outs) {
    if (out.pos() - data_start != o.offset) throw Error(path + ": internal error laying out '" + o.name + "'");
    write_tensor(out, o);
    out.pad(kAlign);
  }
  out.finish();
}

}  // namespace mtb
