// Parameter counts, KV costs and validation of ModelConfig and the presets.
#include <gtest/gtest.h>

#include "mtb/core/error.h"
#include "mtb/model/config.h"
#include "test_util.h"

namespace mtb {
namespace {

TEST(Config, ChapterExampleHas3283456Parameters) {
  ModelConfig c = preset("example-3m");
  EXPECT_EQ(count_params(c).total(), 3283456);
  c.tied_embeddings = true;
  EXPECT_EQ(count_params(c).total(), 3283456 - 1000 * 256);
  c.qk_norm = false;
  EXPECT_EQ(count_params(c).total(), 3283456 - 1000 * 256 - 4 * 2 * 32);
}

TEST(Config, PresetCountsMatchThePublishedModels) {
  EXPECT_EQ(count_params(preset("gpt2-124m")).total(), 124439808);      // GPT-2 small
  EXPECT_EQ(count_params(preset("llama3-8b")).total(), 8030261248);     // Llama 3 8B
  EXPECT_EQ(count_params(preset("llama3.2-1b")).total(), 1235814400);   // Llama 3.2 1B
  EXPECT_EQ(count_params(preset("qwen3-0.6b")).total(), 596049920);     // Qwen3-0.6B
  EXPECT_EQ(count_params(preset("llama3-70b")).total(), 70553706496);   // Llama 3 70B
  for (const auto& name : preset_names()) EXPECT_NO_THROW(preset(name).validate(name));
}

TEST(Config, KvBytesPerTokenAsTheChapterComputesThem) {
  ModelConfig c = preset("llama3-70b");
  EXPECT_EQ(c.kv_bytes_per_token(2), 327680);
  c.n_kv_heads = 64;
  EXPECT_EQ(c.kv_bytes_per_token(2), 2621440);
  c.n_kv_heads = 1;
  EXPECT_EQ(c.kv_bytes_per_token(2), 40960);
  EXPECT_EQ(preset("deepseek-v3").kv_bytes_per_token(2), 70272);
}

TEST(Config, ImpossibleCombinationsAreRefusedWithTheirReason) {
  ModelConfig c = preset("example-3m");
  c.n_kv_heads = 3;
  EXPECT_ERROR_CONTAINS(c.validate("cfg"), "not divisible by n_kv_heads");
  c = preset("example-3m");
  c.head_dim = 31;
  EXPECT_ERROR_CONTAINS(c.validate("cfg"), "even head_dim");
  c = preset("example-3m");
  c.nope_layers = {true, false};
  EXPECT_ERROR_CONTAINS(c.validate("cfg"), "NoPE layer list");
  c = preset("mla-dense-170m");
  c.qk_rope_head_dim = 63;
  EXPECT_ERROR_CONTAINS(c.validate("cfg"), "must be even");
  c = preset("example-3m");
  c.vocab = 0;
  EXPECT_ERROR_CONTAINS(c.validate("cfg"), "vocab must be positive");
  EXPECT_ERROR_CONTAINS(preset("no-such-model"), "unknown preset 'no-such-model'");
}

TEST(Config, Llama3RopeScalingKeepsHighAndDividesLowFrequencies) {
  ModelConfig c = preset("llama3.2-1b");
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling{};
  const auto f = c.rope_inv_freq(), p = plain.rope_inv_freq();
  ASSERT_EQ(f.size(), 32u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);                    // wavelength 2 pi: untouched
  EXPECT_DOUBLE_EQ(f.back(), p.back() / 32.0);   // longest wavelengths: divided by the factor
  for (size_t i = 0; i < f.size(); ++i) EXPECT_LE(f[i], p[i]);
}

}  // namespace
}  // namespace mtb
