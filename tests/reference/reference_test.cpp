// mtb against the PyTorch reference (python/reference, float64): logits for every variant
// of the matrix, stories260K.bin, parameter counts, and models written by `mtb init`.
// The fixtures come from ctest's `reference_fixtures` step (make_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "mtb/core/mapped_file.h"
#include "mtb/io/model_file.h"
#include "mtb/model/config.h"
#include "mtb/runtime/session.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string> kVariants = {
    "example-3m", "mha",            "mqa",         "gqa-tied", "tied-redundant-lmhead",
    "interleaved", "qwen3-like",    "llama3-scaling", "nope-every-4th", "qwen2-like",
    "mistral-bf16", "sharded",      "mla",         "mla-qlora", "gpt2"};

template <typename T>
std::vector<T> read_array(const std::string& path) {
  const std::string bytes = read_text_file(path);
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

std::string fixture(const std::string& rel) {
  const std::string p = test::fixtures_dir() + "/" + rel;
  if (!fs::exists(p)) throw Error(p + " is missing: run ctest (its reference_fixtures step writes it)");
  return p;
}

struct Diff {
  double max_abs_err = 0, max_abs_ref = 0;
  double ratio() const { return max_abs_err / max_abs_ref; }
};

Diff compare(const std::vector<float>& got, const std::vector<double>& want) {
  Diff d;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    d.max_abs_err = std::max(d.max_abs_err, std::fabs(double(got[i]) - want[i]));
    d.max_abs_ref = std::max(d.max_abs_ref, std::fabs(want[i]));
  }
  return d;
}

class Variant : public ::testing::TestWithParam<std::string> {};

TEST_P(Variant, LogitsMatchTheFloat64Reference) {
  const std::string dir = fixture(GetParam());
  Model m = open_model(dir);
  const auto ids = read_array<int32_t>(fixture(GetParam() + "/ids.i32"));
  ASSERT_GE(ids.size(), 64u) << "sequences must be long enough for RoPE bugs to show";
  const auto want = read_array<double>(fixture(GetParam() + "/logits.f64"));
  const Diff d = compare(m.forward(ids), want);
  std::printf("  %-22s max|err| %.3g  max|ref| %.3g  ratio %.3g\n", GetParam().c_str(), d.max_abs_err,
              d.max_abs_ref, d.ratio());
  EXPECT_GT(d.max_abs_ref, 0.5) << "degenerate reference logits";
  EXPECT_LE(d.ratio(), 1e-4);
}

TEST_P(Variant, TokenByTokenDecodingEqualsTheFullForward) {
  const std::string dir = fixture(GetParam());
  Model m = open_model(dir);
  const auto ids = read_array<int32_t>(fixture(GetParam() + "/ids.i32"));
  const std::vector<float> full = m.forward(ids);
  const auto want = read_array<double>(fixture(GetParam() + "/logits.f64"));
  const size_t V = size_t(m.config().vocab);
  SessionOptions so;
  so.context = int(ids.size());
  Session s(m, so);  // F32 cache; MLA decodes in the absorbed form
  const float* logits = s.prefill({ids[0]});
  double worst = 0, worst_ref = 0, scale = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (t) logits = s.decode(ids[t]);
    for (size_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::fabs(double(logits[v]) - full[t * V + v]));
      worst_ref = std::max(worst_ref, std::fabs(double(logits[v]) - want[t * V + v]));
      scale = std::max(scale, std::fabs(want[t * V + v]));
    }
  }
  std::printf("  %-22s decode vs forward %.3g, vs reference %.3g (x max|logit|)\n", GetParam().c_str(), worst / scale,
              worst_ref / scale);
  EXPECT_LE(worst, 1e-4 * scale);
  EXPECT_LE(worst_ref, 1e-4 * scale);
}

INSTANTIATE_TEST_SUITE_P(Matrix, Variant, ::testing::ValuesIn(kVariants),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Matrix, ManifestHoldsExactlyTheVariantsTested) {
  const json j = json::parse(read_text_file(fixture("manifest.json")));
  std::set<std::string> manifest, tested(kVariants.begin(), kVariants.end());
  for (const auto& v : j["variants"]) manifest.insert(v["name"].get<std::string>());
  EXPECT_EQ(manifest, tested);
}

TEST(Matrix, ParameterCountsMatchTheReference) {
  const json counts = json::parse(read_text_file(fixture("param_counts.json")));
  ModelConfig c = preset("example-3m");
  EXPECT_EQ(count_params(c).total(), counts["example-3m"].get<int64_t>());
  EXPECT_EQ(counts["example-3m"].get<int64_t>(), 3283456);
  c.tied_embeddings = true;
  EXPECT_EQ(count_params(c).total(), counts["example-3m-tied"].get<int64_t>());
  c.qk_norm = false;
  EXPECT_EQ(count_params(c).total(), counts["example-3m-tied-no-qknorm"].get<int64_t>());
  c.tied_embeddings = false;
  EXPECT_EQ(count_params(c).total(), counts["example-3m-no-qknorm"].get<int64_t>());
  for (const auto& v : kVariants) {
    LoadedModel m = load_model_file(fixture(v));
    EXPECT_EQ(count_params(m.config).total(), counts[v].get<int64_t>()) << v;
  }
}

TEST(Llama2c, Stories260KLogitsMatchTheReference) {
  const std::string path = test::shared_models() + "/stories260K.bin";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent: skipping the stories260K check";
  Model m = open_model(path);
  const auto ids = read_array<int32_t>(fixture("stories260K/ids.i32"));
  ASSERT_EQ(ids.size(), 64u);
  const Diff d = compare(m.forward(ids), read_array<double>(fixture("stories260K/logits.f64")));
  std::printf("  stories260K max|err| %.3g  max|ref| %.3g  ratio %.3g\n", d.max_abs_err, d.max_abs_ref, d.ratio());
  EXPECT_LE(d.ratio(), 1e-4);
}

TEST(Llama2c, Stories260KGreedyContinuationMatchesTheReference) {
  const std::string path = test::shared_models() + "/stories260K.bin";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent: skipping the stories260K check";
  Model m = open_model(path);
  std::vector<int32_t> want;
  std::istringstream in(read_text_file(fixture("stories260K/greedy.txt")));
  for (int32_t id; in >> id;) want.push_back(id);
  ASSERT_EQ(want.size(), 200u);
  std::vector<int32_t> seq = {1};
  for (size_t step = 0; step < want.size(); ++step) {
    const auto logits = m.forward(seq);  // full recompute: the KV cache is tested elsewhere
    const float* last = logits.data() + logits.size() - size_t(m.config().vocab);
    seq.push_back(int32_t(std::max_element(last, last + m.config().vocab) - last));
  }
  EXPECT_EQ(std::vector<int32_t>(seq.begin() + 1, seq.end()), want);
}

TEST(Llama2c, GenerateGreedyPrintsTheReferencesIds) {
  const std::string path = test::shared_models() + "/stories260K.bin";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent: skipping the stories260K check";
  const std::string out = test::binary_dir() + "/test-scratch/stories-greedy.txt";
  fs::create_directories(test::binary_dir() + "/test-scratch");
  const std::string cmd = test::binary_dir() + "/mtb generate -m " + path +
                          " --prompt-ids 1 -n 200 --temperature 0 --print-ids > " + out + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto words = [](const std::string& text) {
    std::vector<std::string> w;
    std::istringstream in(text);
    for (std::string s; in >> s;) w.push_back(s);
    return w;
  };
  const auto got = words(read_text_file(out)), want = words(read_text_file(fixture("stories260K/greedy.txt")));
  ASSERT_EQ(want.size(), 200u);
  EXPECT_EQ(got, want);
}

// `mtb init` writes a directory; the reference reads it as Hugging Face's loaders would and
// computes logits; `mtb logits` on the same directory must agree.
int run(const std::string& cmd) {
  const int rc = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void check_init_dir(const std::string& name, const std::string& init_args) {
  const std::string dir = test::binary_dir() + "/test-scratch/init-" + name;
  fs::remove_all(dir);
  const std::string mtb = test::binary_dir() + "/mtb";
  ASSERT_EQ(run(mtb + " init " + init_args + " --seed 3 -o " + dir), 0) << init_args;
  std::string ids;
  for (int i = 0; i < 70; ++i) {
    if (i) ids += ',';
    ids += std::to_string((i * 37 + 11) % 200);
  }
  ASSERT_EQ(run(mtb + " logits -m " + dir + " --ids " + ids + " -o " + dir + "/mtb.f32"), 0);
  ASSERT_EQ(run("/usr/bin/python3 " + test::source_dir() + "/python/reference/eval_hf.py " + dir + " --ids " + ids +
                " --out " + dir + "/ref.f64"),
            0)
      << "the reference could not read what mtb init wrote for " << name;
  const auto got = read_array<float>(dir + "/mtb.f32");
  const Diff d = compare(got, read_array<double>(dir + "/ref.f64"));
  std::printf("  init %-12s max|err| %.3g  max|ref| %.3g  ratio %.3g\n", name.c_str(), d.max_abs_err, d.max_abs_ref,
              d.ratio());
  EXPECT_LE(d.ratio(), 1e-4) << name;
}

TEST(Init, ExampleModelIsAValidHuggingFaceDirectory) { check_init_dir("example-3m", "--preset example-3m"); }

TEST(Init, EveryFamilyIsAValidHuggingFaceDirectory) {
  // Small configs of each family, written as JSON and passed with --config.
  const std::string base = test::binary_dir() + "/test-scratch/init-configs";
  fs::create_directories(base);
  const std::vector<std::pair<std::string, json>> configs = {
      {"llama", {{"model_type", "llama"}, {"vocab_size", 256}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                 {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 96},
                 {"rope_theta", 500000.0}, {"tie_word_embeddings", true},
                 {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                   {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}}}}},
      {"qwen2", {{"model_type", "qwen2"}, {"vocab_size", 256}, {"hidden_size", 64}, {"num_hidden_layers", 2},
                 {"num_attention_heads", 4}, {"num_key_value_heads", 1}, {"intermediate_size", 96}}},
      {"deepseek_v2", {{"model_type", "deepseek_v2"}, {"vocab_size", 256}, {"hidden_size", 64},
                       {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"intermediate_size", 96},
                       {"q_lora_rank", 24}, {"kv_lora_rank", 32}, {"qk_nope_head_dim", 16},
                       {"qk_rope_head_dim", 8}, {"v_head_dim", 12}}},
      {"gpt2", {{"model_type", "gpt2"}, {"vocab_size", 256}, {"n_embd", 64}, {"n_layer", 2}, {"n_head", 4},
                {"n_positions", 128}}},
  };
  for (const auto& [name, cfg] : configs) {
    const std::string path = base + "/" + name + ".json";
    std::ofstream(path) << cfg.dump(2);
    check_init_dir(name, "--config " + path);
    check_init_dir(name + "-bf16", "--config " + path + " --dtype bf16");
  }
}

}  // namespace
}  // namespace mtb
