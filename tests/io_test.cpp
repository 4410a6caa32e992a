// safetensors, Hugging Face directories and llama2.c files: round trips and bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mtb/core/mapped_file.h"
#include "mtb/io/hf.h"
#include "mtb/io/llama2c.h"
#include "mtb/io/model_file.h"
#include "mtb/io/safetensors.h"
#include "mtb/model/model.h"
#include "mtb/model/weights.h"
#include "mtb/tools/init.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// A fresh, empty directory under the build tree for one test.
std::string scratch(const std::string& name) {
  const fs::path p = fs::path(test::binary_dir()) / "test-scratch" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_bytes(const std::string& path) { return read_text_file(path); }

// A safetensors file from a raw header and data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

ModelConfig tiny(const std::string& family) {
  ModelConfig c;
  c.family = family;
  c.vocab = 64, c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.d_ff = 48;
  c.max_context = 64;
  if (family == "qwen3") c.qk_norm = true;
  if (family == "qwen2") c.bias = BiasKind::QKV;
  if (family == "deepseek_v3") {
    c.attention = AttentionKind::MLA, c.rope_layout = RopeLayout::Interleaved;
    c.kv_lora_rank = 16, c.qk_nope_head_dim = 8, c.qk_rope_head_dim = 4, c.v_head_dim = 6, c.q_lora_rank = 12;
    c.n_kv_heads = 4;
  }
  if (family == "gpt2") {
    c.norm = NormKind::LayerNorm, c.ffn = FfnKind::GeluMlp, c.position = PositionKind::Learned;
    c.bias = BiasKind::All, c.tied_embeddings = true, c.n_kv_heads = 4, c.d_ff = 128;
  }
  c.validate();
  return c;
}

// Large files opened for decoding are read into huge pages; the bytes are the file's either
// way, and start on the same alignment.
TEST(MappedFile, HugePageReadsHoldTheFilesBytes) {
  const std::string path = scratch("mapped-file") + "/big.bin";
  std::string bytes(size_t(65) << 20, '\0');  // just over the 64 MiB from which it applies
  uint32_t h = 12345;
  for (char& c : bytes) c = char((h = h * 1664525u + 1013904223u) >> 24);
  write_bytes(path, bytes);
  const auto mapped = MappedFile::open(path);
  std::shared_ptr<MappedFile> read;
  {
    const HugePageReads huge;
    read = MappedFile::open(path);
  }
  ASSERT_EQ(read->size(), bytes.size());
  ASSERT_EQ(mapped->size(), bytes.size());
  EXPECT_EQ(std::memcmp(read->data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(std::memcmp(mapped->data(), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(read->data()) % 4096, 0u);
  fs::remove(path);
}

TEST(Safetensors, WriteReadRoundTripIsExact) {
  const std::string dir = scratch("st-roundtrip");
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::vector<uint16_t> b = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f)};
  NamedTensors t = {{"a", Tensor{DType::F32, {2, 3}, a.data()}}, {"b", Tensor{DType::BF16, {2}, b.data()}}};
  write_safetensors(dir + "/x.safetensors", t);
  TensorMap m;
  read_safetensors(dir + "/x.safetensors", m);
  ASSERT_TRUE(m.contains("a") && m.contains("b"));
  EXPECT_EQ(m.find("a")->tensor.shape, (Shape{2, 3}));
  EXPECT_EQ(m.find("a")->tensor.to_vector(), a);
  EXPECT_EQ(m.find("b")->tensor.dtype, DType::BF16);
  EXPECT_EQ(m.find("b")->tensor.to_vector(), (std::vector<float>{1.0f, -0.5f}));
  // The header is padded to 8 bytes, so F32 data is aligned in the file.
  uint64_t n;
  std::memcpy(&n, read_bytes(dir + "/x.safetensors").data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, ShardedDirectoryWithIndex) {
  const std::string dir = scratch("st-sharded");
  std::vector<float> a(100, 1.0f), b(100, 2.0f), c(100, 3.0f);
  NamedTensors t = {{"a", Tensor{DType::F32, {100}, a.data()}},
                    {"b", Tensor{DType::F32, {100}, b.data()}},
                    {"c", Tensor{DType::F32, {100}, c.data()}}};
  write_safetensors_dir(dir, t, 500);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir + "/model-00003-of-00003.safetensors"));
  TensorMap m;
  read_safetensors_dir(dir, m);
  EXPECT_EQ(m.find("c")->tensor.to_vector(), c);
  EXPECT_NE(m.find("a")->source, m.find("c")->source);
  // An index naming a tensor its shard lacks is an error naming the tensor.
  json idx = json::parse(read_bytes(dir + "/model.safetensors.index.json"));
  idx["weight_map"]["ghost"] = "model-00001-of-00003.safetensors";
  write_bytes(dir + "/model.safetensors.index.json", idx.dump());
  TensorMap m2;
  EXPECT_ERROR_CONTAINS(read_safetensors_dir(dir, m2), "tensor 'ghost'");
}

TEST(Safetensors, BadFilesGiveOneLineErrorsNamingFileAndTensor) {
  const std::string dir = scratch("st-bad");
  const std::string f = dir + "/bad.safetensors";
  auto expect_error = [&](const std::string& bytes, const std::string& needle) {
    write_bytes(f, bytes);
    TensorMap m;
    EXPECT_ERROR_CONTAINS(read_safetensors(f, m), needle);
    try {
      read_safetensors(f, m);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    }
  };
  const std::string data(24, '\0');
  expect_error("abc", "truncated");
  expect_error(safetensors_bytes("{}", "").substr(0, 8), "");  // empty header: reads as corrupt JSON
  expect_error(std::string("\xff\xff\xff\xff\0\0\0\0", 8) + "{}", "corrupt safetensors header length");
  expect_error(safetensors_bytes("{\"w\": {\"dtype\": \"F32\"", data), "corrupt safetensors header");
  expect_error(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 24]}})", data),
               "tensor 'w': 24 bytes do not hold shape [2, 4]");
  expect_error(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 48]}})", data),
               "run past the data");
  expect_error(safetensors_bytes(R"({"w": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]}})", data),
               "unsupported dtype I64");
  expect_error(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", data),
               "shape");
  expect_error(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2]}})", data), "data_offsets");
}

class FamilyRoundTrip : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(FamilyRoundTrip, InitWriteReadGivesBitIdenticalLogits) {
  const auto [family, dtype] = GetParam();
  const ModelConfig c = tiny(family);
  const std::string dir = scratch("rt-" + family + "-" + dtype_name(dtype));
  TensorMap w = init_weights(c, 7, dtype, 0.2f);
  Model in_memory(c, w, "init");
  save_hf_dir(dir, c, w, dtype, family == "llama" ? 4096 : 0);  // llama: sharded
  Model loaded = open_model(dir);
  EXPECT_EQ(loaded.config().family, family);
  const std::vector<int32_t> ids = {1, 5, 9, 63, 0, 17, 33, 2, 8, 40};
  const auto a = in_memory.forward(ids), b = loaded.forward(ids);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "logits differ after the round trip";
  // Mapped, not copied: the loaded embedding points into the file mapping (GPT-2's
  // Conv1D matrices are re-laid out at load; its embedding is still mapped).
  EXPECT_NE(loaded.tensors().find(kTokenEmbedding)->source.find(".safetensors"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyRoundTrip,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "deepseek_v3", "gpt2"),
                                            ::testing::Values(DType::F32, DType::BF16)));

TEST(HfDir, BadModelsGiveOneLineErrors) {
  const ModelConfig c = tiny("qwen3");
  const std::string dir = scratch("hf-bad");
  TensorMap w = init_weights(c, 1, DType::F32);
  save_hf_dir(dir, c, w, DType::F32);
  const json good = json::parse(read_bytes(dir + "/config.json"));
  auto with_config = [&](json j) { write_bytes(dir + "/config.json", j.dump()); };

  json j = good;
  j["model_type"] = "mamba";
  with_config(j);
  EXPECT_ERROR_CONTAINS(open_model(dir), "unknown model_type 'mamba'");
  j = good;
  j["num_key_value_heads"] = 3;
  with_config(j);
  EXPECT_ERROR_CONTAINS(open_model(dir), "not divisible by n_kv_heads");
  j = good;
  j.erase("hidden_size");
  with_config(j);
  EXPECT_ERROR_CONTAINS(open_model(dir), "key 'hidden_size' is missing");
  j = good;
  j["intermediate_size"] = 50;  // the file's MLP tensors are [48, 32]
  with_config(j);
  EXPECT_ERROR_CONTAINS(open_model(dir), "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [48, 32], expected [50, 32]");
  {
    ModelConfig tied = c;
    tied.tied_embeddings = true;
    const std::string tdir = scratch("hf-bad-tied");
    save_hf_dir(tdir, tied, init_weights(tied, 1, DType::F32), DType::F32);
    json t = json::parse(read_bytes(tdir + "/config.json"));
    t["tie_word_embeddings"] = false;  // the file has no lm_head
    write_bytes(tdir + "/config.json", t.dump());
    EXPECT_ERROR_CONTAINS(open_model(tdir), "missing tensor 'lm_head.weight'");
  }
  write_bytes(dir + "/config.json", "{ not json");
  EXPECT_ERROR_CONTAINS(open_model(dir), "config.json: invalid JSON");
  with_config(good);

  // A missing tensor, a wrong dtype, an unknown extra tensor.
  TensorMap partial;
  NamedTensors keep;
  for (const auto& [name, nt] : w.items())
    if (name != "model.norm.weight") keep.emplace_back(name, nt.tensor);
  write_safetensors(dir + "/model.safetensors", keep);
  EXPECT_ERROR_CONTAINS(open_model(dir), "missing tensor 'model.norm.weight'");
  std::vector<int32_t> junk(32);
  keep.emplace_back("model.norm.weight", Tensor{DType::F32, {32}, junk.data()});
  keep.emplace_back("model.extra.weight", Tensor{DType::F32, {2}, junk.data()});
  write_safetensors(dir + "/model.safetensors", keep);
  EXPECT_ERROR_CONTAINS(open_model(dir), "unexpected tensor 'model.extra.weight'");
  const std::string st = read_bytes(dir + "/model.safetensors");
  write_bytes(dir + "/model.safetensors", st.substr(0, st.size() - 100));
  EXPECT_ERROR_CONTAINS(open_model(dir), "run past the data");
}

TEST(HfDir, TokenIdsOutsideTheVocabularyAndOverlongSequencesAreRefused) {
  const ModelConfig c = tiny("llama");
  Model m(c, init_weights(c, 1, DType::F32), "init");
  EXPECT_ERROR_CONTAINS(m.forward({1, 2, 64}), "token id 64 at position 2 is outside the vocabulary [0, 64)");
  EXPECT_ERROR_CONTAINS(m.forward({}), "empty");
  EXPECT_ERROR_CONTAINS(m.forward(std::vector<int32_t>(65, 1)), "longer than the model's context of 64");
}

TEST(HfDir, MixtureOfExpertsLayersAreRefusedClearly) {
  const std::string dir = scratch("hf-moe");
  const ModelConfig c = tiny("deepseek_v3");
  save_hf_dir(dir, c, init_weights(c, 1, DType::F32), DType::F32);
  json j = json::parse(read_bytes(dir + "/config.json"));
  j["first_k_dense_replace"] = 1, j["n_routed_experts"] = 4, j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 16;
  write_bytes(dir + "/config.json", j.dump());
  EXPECT_ERROR_CONTAINS(open_model(dir), "layer 1 is a mixture-of-experts layer");
}

TEST(Llama2c, TruncatedAndCorruptFilesAreRefused) {
  const std::string path = test::shared_models() + "/stories260K.bin";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent: skipping the llama2.c file tests";
  const std::string dir = scratch("l2c");
  const std::string bytes = read_bytes(path);
  write_bytes(dir + "/short.bin", bytes.substr(0, bytes.size() - 5000));
  EXPECT_ERROR_CONTAINS(load_llama2c(dir + "/short.bin"), "truncated llama2.c checkpoint");
  std::string bad = bytes;
  const int32_t zero = 0;
  std::memcpy(bad.data() + 12, &zero, 4);  // n_heads = 0
  write_bytes(dir + "/bad.bin", bad);
  EXPECT_ERROR_CONTAINS(load_llama2c(dir + "/bad.bin"), "corrupt llama2.c header");
  write_bytes(dir + "/tiny.bin", "abc");
  EXPECT_ERROR_CONTAINS(load_llama2c(dir + "/tiny.bin"), "truncated");
  EXPECT_ERROR_CONTAINS(open_model(dir + "/nothing.bin"), "no such file");
}

}  // namespace
}  // namespace mtb
