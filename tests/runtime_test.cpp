// The runtime: KV-cache decoding against the full forward, MLA's absorbed form against the
// plain one, cache sizes against the planner, the sampler against hand-computed
// distributions, and decoding without allocation.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>

#include "mtb/runtime/generate.h"
#include "mtb/runtime/sampler.h"
#include "mtb/runtime/session.h"
#include "mtb/tools/init.h"
#include "mtb/tools/kv_planner.h"
#include "mtb/tools/report.h"
#include "test_util.h"

#include "alloc_counter.h"

namespace mtb {
namespace {

ModelConfig small(const std::string& kind) {
  ModelConfig c;
  c.family = "llama";
  c.vocab = 97, c.d_model = 48, c.n_layers = 3, c.n_heads = 6, c.n_kv_heads = 2, c.head_dim = 8, c.d_ff = 64;
  c.max_context = 96;
  if (kind == "mla" || kind == "mla-qlora") {
    c.family = "deepseek_v3", c.attention = AttentionKind::MLA, c.rope_layout = RopeLayout::Interleaved;
    c.kv_lora_rank = 24, c.qk_nope_head_dim = 8, c.qk_rope_head_dim = 4, c.v_head_dim = 6, c.n_kv_heads = 6;
    if (kind == "mla-qlora") c.q_lora_rank = 16;
  }
  if (kind == "gpt2") {
    c.family = "gpt2", c.norm = NormKind::LayerNorm, c.ffn = FfnKind::GeluMlp, c.position = PositionKind::Learned;
    c.bias = BiasKind::All, c.n_kv_heads = 6, c.tied_embeddings = true;
  }
  if (kind == "qwen3") c.family = "qwen3", c.qk_norm = true;
  if (kind == "nope") c.nope_layers = {false, true, false};
  if (kind == "gqa-wide") c.head_dim = 128;  // cache rows of 1 KiB (F32) / 512 B (BF16): padded
  c.validate();
  return c;
}

std::vector<int32_t> some_ids(int n, int vocab, int seed = 1) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 31 + seed * 17 + i * i * 7) % vocab);
  return ids;
}

double max_abs(const float* a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i])));
  return m;
}

// Decodes ids one by one (after a prefill of `prefill` tokens) and compares each position's
// logits with the full forward's.
void expect_decode_matches_forward(const Model& m, const std::vector<int32_t>& ids, int prefill, MlaForm mla,
                                   DType cache, double tol) {
  const int V = m.config().vocab;
  const std::vector<float> full = m.forward(ids);
  const double scale = max_abs(full.data(), full.size());
  SessionOptions so;
  so.context = int(ids.size()), so.mla = mla, so.cache_type = cache, so.prefill_chunk = 7;
  Session s(m, so);
  const float* logits = s.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + prefill));
  double worst = 0;
  for (size_t t = size_t(prefill) - 1; t < ids.size(); ++t) {
    if (t >= size_t(prefill)) logits = s.decode(ids[t]);
    for (int v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double(logits[v]) - full[t * V + size_t(v)]));
  }
  EXPECT_LE(worst, tol * scale) << "worst " << worst << " scale " << scale << " cache " << dtype_name(cache)
                                << " prefill " << prefill;
}

class DecodeVariants : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeVariants, TokenByTokenEqualsFullForward) {
  const ModelConfig c = small(GetParam());
  Model m(c, init_weights(c, 11, DType::F32, 0.3f), "init");
  const auto ids = some_ids(70, c.vocab);
  expect_decode_matches_forward(m, ids, 1, MlaForm::Auto, DType::F32, 1e-5);
  expect_decode_matches_forward(m, ids, 20, MlaForm::Auto, DType::F32, 1e-5);  // chunked prefill, then decode
  expect_decode_matches_forward(m, ids, 5, MlaForm::Auto, DType::BF16, 8e-2);  // rounded cache (8 bits): looser
  expect_decode_matches_forward(m, ids, 5, MlaForm::Auto, DType::F16, 5e-3);
}

INSTANTIATE_TEST_SUITE_P(Variants, DecodeVariants,
                         ::testing::Values("gqa", "gqa-wide", "qwen3", "nope", "gpt2", "mla", "mla-qlora"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Mla, AbsorbedDecodeEqualsPlainDecode) {
  for (const char* kind : {"mla", "mla-qlora"}) {
    const ModelConfig c = small(kind);
    Model m(c, init_weights(c, 5, DType::F32, 0.3f), "init");
    const auto ids = some_ids(60, c.vocab, 3);
    expect_decode_matches_forward(m, ids, 1, MlaForm::Plain, DType::F32, 1e-5);
    expect_decode_matches_forward(m, ids, 1, MlaForm::Absorbed, DType::F32, 1e-5);
    expect_decode_matches_forward(m, ids, 30, MlaForm::Absorbed, DType::F32, 1e-5);  // absorbed prefill too
  }
}

TEST(KvCache, AllocatedBytesEqualThePlannersPrediction) {
  for (const char* kind : {"gqa", "mla", "gpt2"}) {
    const ModelConfig c = small(kind);
    for (DType t : {DType::F32, DType::BF16}) {
      KVCache cache(c, 77, t);
      KvPlanRequest r;
      r.bytes_per_element = int(dtype_size(t));
      const KvVariant configured = kv_variants(c, r)[0];
      EXPECT_TRUE(configured.configured);
      EXPECT_EQ(cache.bytes(), configured.bytes_per_token * 77) << kind;
    }
  }
  // MLA holds kv_lora_rank + qk_rope_head_dim elements per token per layer.
  const ModelConfig mla = small("mla");
  EXPECT_EQ(KVCache(mla, 10, DType::F32).bytes(), int64_t(10) * 3 * (24 + 4) * 4);
  // Rows of a multiple of 512 bytes (here 2 x 128 elements) are padded by a cache line each,
  // which the planner (the chapter's count) leaves out.
  const ModelConfig wide = small("gqa-wide");
  for (DType t : {DType::F32, DType::BF16}) {
    const KVCache cache(wide, 10, t);
    EXPECT_EQ(cache.bytes(), int64_t(10) * 3 * 2 * (2 * 128 * int64_t(dtype_size(t)) + 64)) << dtype_name(t);
    EXPECT_EQ(cache.row_stride(), 2 * 128 + 64 / int64_t(dtype_size(t)));
  }
}

TEST(Session, ContextOverflowIsRefusedAndNothingIsAppended) {
  const ModelConfig c = small("gqa");
  Model m(c, init_weights(c, 1, DType::F32), "init");
  SessionOptions so;
  so.context = 10;
  Session s(m, so);
  s.prefill(some_ids(8, c.vocab));
  EXPECT_ERROR_CONTAINS(s.prefill(some_ids(3, c.vocab)), "does not fit");
  EXPECT_EQ(s.position(), 8);
  EXPECT_ERROR_CONTAINS(s.prefill({1, 97}), "token id 97");
  EXPECT_EQ(s.position(), 8);
  s.decode(1), s.decode(2);
  EXPECT_ERROR_CONTAINS(s.decode(3), "context full");
  so.context = 1000;
  EXPECT_ERROR_CONTAINS(Session(m, so), "past the model's maximum of 96");
}

TEST(Session, DecodingDoesNotAllocate) {
  for (const char* kind : {"gqa", "mla"}) {
    const ModelConfig c = small(kind);
    Model m(c, init_weights(c, 1, DType::F32), "init");
    SessionOptions so;
    so.context = 90;
    Session s(m, so);
    SamplerOptions sampling;
    sampling.temperature = 0.8f, sampling.top_p = 0.9f, sampling.top_k = 20, sampling.repetition_penalty = 1.1f;
    Sampler sampler(sampling, c.vocab);
    const float* logits = s.prefill(some_ids(10, c.vocab));
    int32_t next = sampler.sample(logits, s.tokens());
    logits = s.decode(next);  // warm up
    const long before = test::allocation_count();
    for (int i = 0; i < 60; ++i) {
      next = sampler.sample(logits, s.tokens());
      logits = s.decode(next);
    }
    EXPECT_EQ(test::allocation_count() - before, 0) << kind << ": allocations while decoding 60 tokens";
  }
}

// Sampler: crafted logits against hand-computed distributions.
std::map<int32_t, double> as_map(const std::vector<std::pair<int32_t, float>>& d) {
  std::map<int32_t, double> m;
  for (auto [id, p] : d) m[id] = p;
  return m;
}

TEST(Sampler, FiltersGiveTheHandComputedDistributions) {
  // Probabilities proportional to 8, 4, 2, 1, 1 (logits = log of those).
  const std::vector<float> logits = {std::log(2.0f), std::log(8.0f), std::log(1.0f), std::log(4.0f), std::log(1.0f)};
  auto dist = [&](SamplerOptions o) { return as_map(Sampler(o, 5).distribution(logits.data(), {})); };
  SamplerOptions o;
  auto d = dist(o);  // plain softmax: 8/16, 4/16, 2/16, 1/16, 1/16
  EXPECT_NEAR(d[1], 0.5, 1e-6);
  EXPECT_NEAR(d[3], 0.25, 1e-6);
  EXPECT_NEAR(d[0], 0.125, 1e-6);
  EXPECT_NEAR(d[2], 0.0625, 1e-6);
  o.top_k = 2;  // 8 and 4 -> 2/3, 1/3
  d = dist(o);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[1], 2.0 / 3, 1e-6);
  EXPECT_NEAR(d[3], 1.0 / 3, 1e-6);
  o = {};
  o.top_p = 0.8f;  // 0.5 + 0.25 = 0.75 < 0.8, + 0.125 reaches it: {1, 3, 0} -> 8/14, 4/14, 2/14
  d = dist(o);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[1], 8.0 / 14, 1e-6);
  EXPECT_NEAR(d[0], 2.0 / 14, 1e-6);
  o = {};
  o.min_p = 0.2f;  // keep p >= 0.2 * 0.5 = 0.1: {1, 3, 0}
  d = dist(o);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[3], 4.0 / 14, 1e-6);
  o = {};
  o.temperature = 0.5f;  // squares the odds: 64, 16, 4, 1, 1 over 86
  d = dist(o);
  EXPECT_NEAR(d[1], 64.0 / 86, 1e-6);
  EXPECT_NEAR(d[4], 1.0 / 86, 1e-6);
  o = {};
  o.repetition_penalty = 2.0f;  // token 1 seen (twice: penalized once): log 8 / 2 = log(2.83)
  d = as_map(Sampler(o, 5).distribution(logits.data(), {1, 1}));
  const double p1 = std::sqrt(8.0), total = p1 + 4 + 2 + 1 + 1;
  EXPECT_NEAR(d[1], p1 / total, 1e-6);
  o = {};
  o.temperature = 0;
  d = dist(o);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.begin()->first, 1);
}

TEST(Sampler, SeedsMakeRunsReproducibleAndDifferentSeedsDiffer) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[size_t(i)] = float(std::sin(i * 0.7));
  auto draw = [&](uint64_t seed) {
    SamplerOptions o;
    o.seed = seed, o.temperature = 1.5f;
    Sampler s(o, 50);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.sample(logits.data(), {}));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
  // And the draws follow the distribution: the frequency of the likeliest token is near its probability.
  SamplerOptions o;
  o.seed = 1;
  Sampler s(o, 50);
  const auto d = s.distribution(logits.data(), {});
  int hits = 0;
  for (int i = 0; i < 20000; ++i) hits += s.sample(logits.data(), {}) == d[0].first;
  EXPECT_NEAR(hits / 20000.0, d[0].second, 0.01);
}

TEST(Sampler, BadValuesAreRefused) {
  SamplerOptions o;
  o.temperature = -1;
  EXPECT_ERROR_CONTAINS(o.validate(), "--temperature");
  o = {};
  o.top_p = 0;
  EXPECT_ERROR_CONTAINS(o.validate(), "--top-p must be in (0, 1]");
  o.top_p = 1.5f;
  EXPECT_ERROR_CONTAINS(o.validate(), "--top-p");
  o = {};
  o.min_p = 1;
  EXPECT_ERROR_CONTAINS(o.validate(), "--min-p");
  o = {};
  o.repetition_penalty = 0;
  EXPECT_ERROR_CONTAINS(o.validate(), "--repeat-penalty");
}

TEST(Generate, StopsOnStopIdsAndRefusesOverlongRequests) {
  const ModelConfig c = small("gqa");
  Model m(c, init_weights(c, 1, DType::F32, 0.3f), "init");
  EngineOptions eo;
  eo.context = 40;
  Engine e(m, eo);
  SamplerOptions greedy;
  greedy.temperature = 0;
  GenerateOptions go;
  go.max_tokens = 20;
  std::vector<int32_t> out;
  generate(e, {1, 2, 3}, greedy, go, [&](int32_t id) { out.push_back(id); });
  ASSERT_EQ(out.size(), 20u);
  // Stop on the third generated token.
  go.stop_ids = {out[2]};
  std::vector<int32_t> out2;
  const auto st = generate(e, {1, 2, 3}, greedy, go, [&](int32_t id) { out2.push_back(id); });
  EXPECT_TRUE(st.stopped);
  EXPECT_EQ(out2, std::vector<int32_t>(out.begin(), out.begin() + 3));
  go.max_tokens = 38;
  EXPECT_ERROR_CONTAINS(generate(e, {1, 2, 3}, greedy, go, [](int32_t) {}), "exceed the context of 40");
  go.max_tokens = 1;
  EXPECT_ERROR_CONTAINS(generate(e, some_ids(41, c.vocab), greedy, go, [](int32_t) {}), "longer than the context");
}

// The chapter's worked examples, to the byte.
TEST(KvPlanner, ReproducesTheChaptersWorkedExamples) {
  KvPlanRequest bf16;
  bf16.bytes_per_element = 2;
  auto find = [](const std::vector<KvVariant>& v, const std::string& name) {
    for (const auto& x : v)
      if (x.name == name) return x;
    ADD_FAILURE() << "no variant " << name;
    return KvVariant{};
  };
  const auto l70 = kv_variants(preset("llama3-70b"), bf16);
  EXPECT_EQ(l70[0].name, "GQA-8");
  EXPECT_EQ(find(l70, "MHA").bytes_per_token, 2621440);
  EXPECT_EQ(find(l70, "GQA-8").bytes_per_token, 327680);
  EXPECT_EQ(find(l70, "MQA").bytes_per_token, 40960);
  EXPECT_EQ(find(l70, "MHA").bytes_per_token * 131072, int64_t(320) << 30);
  EXPECT_EQ(find(l70, "GQA-8").bytes_per_token * 131072, int64_t(40) << 30);
  EXPECT_EQ(find(l70, "MQA").bytes_per_token * 131072, int64_t(5) << 30);
  const auto ds = kv_variants(preset("deepseek-v3"), bf16);
  EXPECT_EQ(ds[0].name, "MLA");
  EXPECT_EQ(ds[0].bytes_per_token, 70272);
  EXPECT_EQ(human_bytes(70272.0), "68.6 KiB");
  EXPECT_NEAR(70272.0 * 131072 / (1 << 30), 8.6, 0.05);
  EXPECT_EQ(find(ds, "MHA").bytes_per_token, int64_t(128) * (192 + 128) * 61 * 2);
  EXPECT_EQ(human_bytes(double(find(ds, "MHA").bytes_per_token)), "4.77 MiB");
  EXPECT_NEAR(double(find(ds, "MHA").bytes_per_token) / 70272, 71.1, 0.1);
  // The self-test model: L=32, h=32, dh=128, n_kv=8, fp16.
  ModelConfig self = preset("llama3-8b");
  ASSERT_EQ(self.n_layers, 32);
  ASSERT_EQ(self.n_heads, 32);
  ASSERT_EQ(self.n_kv_heads, 8);
  const auto st = kv_variants(self, bf16);
  EXPECT_EQ(st[0].bytes_per_token, 131072);
  EXPECT_EQ(human_bytes(double(st[0].bytes_per_token)), "128 KiB");
  EXPECT_EQ(st[0].bytes_per_token * 32768, int64_t(4) << 30);
  // A budget: the longest context that fits.
  EXPECT_EQ(max_context_for_budget(int64_t(40) << 30, 327680), 131072);
  EXPECT_EQ(parse_bytes("24GiB"), int64_t(24) << 30);
  EXPECT_EQ(parse_bytes("80 GB"), int64_t(80000000000));
  EXPECT_EQ(parse_bytes("1024"), 1024);
  EXPECT_ERROR_CONTAINS(parse_bytes("lots"), "'lots' is not a size");
  EXPECT_ERROR_CONTAINS(parse_element_bytes("fp64"), "'fp64' is not an element type");
}

}  // namespace
}  // namespace mtb
