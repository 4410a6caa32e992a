// The batching engine: many sequences through the scheduler give each one exactly the bits it
// gets alone (ids and every step's logits), with preemption, with prefix sharing, after
// eviction; bad input is refused or handled as documented; steps do not allocate.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <stdexcept>

#include "mtb/core/error.h"
#include "mtb/runtime/engine.h"
#include "mtb/runtime/session.h"
#include "mtb/tools/init.h"

#include "alloc_counter.h"

namespace mtb {
namespace {

ModelConfig small(const std::string& kind) {
  ModelConfig c;
  c.family = "llama";
  c.vocab = 97, c.d_model = 48, c.n_layers = 2, c.n_heads = 6, c.n_kv_heads = 2, c.head_dim = 8, c.d_ff = 64;
  c.max_context = 1200;
  if (kind == "qwen3") c.family = "qwen3", c.qk_norm = true;
  if (kind == "mla") {
    c.family = "deepseek_v3", c.attention = AttentionKind::MLA, c.rope_layout = RopeLayout::Interleaved;
    c.kv_lora_rank = 24, c.qk_nope_head_dim = 8, c.qk_rope_head_dim = 4, c.v_head_dim = 6, c.n_kv_heads = 6;
    c.q_lora_rank = 16;
  }
  if (kind == "gpt2") {
    c.family = "gpt2", c.norm = NormKind::LayerNorm, c.ffn = FfnKind::GeluMlp, c.position = PositionKind::Learned;
    c.bias = BiasKind::All, c.n_kv_heads = 6, c.tied_embeddings = true;
  }
  c.validate();
  return c;
}

uint64_t hash_floats(const float* p, int n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < size_t(n) * 4; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<uint64_t> logit_hashes;  // one per generated token
  FinishReason finish = FinishReason::None;
  int reused = 0;
};

struct Spec {
  std::vector<int32_t> prompt;
  int max_tokens = 8;
  SamplerOptions sampling;
  int arrival = 0;  // step at which it is submitted
};

Request make_request(const Spec& sp, Outcome& out, int vocab) {
  Request r;
  r.prompt = sp.prompt, r.max_tokens = sp.max_tokens, r.sampling = sp.sampling;
  r.on_token = [&out, vocab](const TokenEvent& e) {
    if (e.token >= 0) {
      out.ids.push_back(e.token);
      out.logit_hashes.push_back(hash_floats(e.logits, vocab));
    }
    if (e.finish != FinishReason::None) out.finish = e.finish, out.reused = e.reused;
  };
  return r;
}

// Runs the specs through one engine, each submitted at its arrival step.
std::vector<Outcome> run_together(const Model& m, const std::vector<Spec>& specs, EngineOptions eo,
                                  EngineStats* stats = nullptr) {
  Engine e(m, eo);
  std::vector<Outcome> out(specs.size());
  size_t submitted = 0;
  std::vector<size_t> order(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return specs[a].arrival < specs[b].arrival; });
  for (int step = 0; submitted < specs.size() || !e.idle(); ++step) {
    while (submitted < specs.size() && specs[order[submitted]].arrival <= step) {
      const size_t i = order[submitted++];
      e.submit(make_request(specs[i], out[i], m.config().vocab));
    }
    e.step();
  }
  if (stats) *stats = e.stats();
  EXPECT_EQ(e.pool().referenced(), 0) << "blocks still held after every request finished";
  return out;
}

Outcome run_alone(const Model& m, const Spec& sp, EngineOptions eo) {
  eo.max_seqs = 1;
  std::vector<Outcome> o = run_together(m, {sp}, eo);
  return o[0];
}

std::vector<Spec> random_specs(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Spec> specs(static_cast<size_t>(n));
  for (auto& sp : specs) {
    const int len = std::uniform_int_distribution<int>(1, 300)(rng);
    for (int i = 0; i < len; ++i) sp.prompt.push_back(std::uniform_int_distribution<int>(0, vocab - 1)(rng));
    sp.max_tokens = std::uniform_int_distribution<int>(1, 24)(rng);
    sp.arrival = std::uniform_int_distribution<int>(0, 30)(rng);
    if (rng() % 3) {  // sampled, with its own seed and filters
      sp.sampling.temperature = 0.5f + float(rng() % 100) / 100.0f;
      sp.sampling.top_k = int(rng() % 2) * 20;
      sp.sampling.top_p = rng() % 2 ? 0.9f : 1.0f;
      sp.sampling.repetition_penalty = rng() % 2 ? 1.1f : 1.0f;
      sp.sampling.seed = rng();
    } else {
      sp.sampling.temperature = 0.0f;
    }
  }
  return specs;
}

void expect_same(const Outcome& together, const Outcome& alone, const std::string& what) {
  EXPECT_EQ(together.ids, alone.ids) << what;
  EXPECT_EQ(together.logit_hashes, alone.logit_hashes) << what << ": logits differ in bits";
  EXPECT_EQ(together.finish, alone.finish) << what;
}

class EngineVariants : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineVariants, SixteenSequencesTogetherGiveTheBitsEachGetsAlone) {
  const ModelConfig c = small(GetParam());
  Model m(c, init_weights(c, 7, DType::F32, 0.3f), "init");
  const auto specs = random_specs(16, c.vocab, 42);
  EngineOptions eo;
  eo.kv_tokens = 16 * 340, eo.max_seqs = 16, eo.batch_tokens = 96;
  EngineStats st;
  const auto together = run_together(m, specs, eo, &st);
  EXPECT_GE(st.peak_running, 8) << "the batches should have held many sequences at once";
  EngineOptions alone = eo;
  alone.batch_tokens = 37;  // other prompt chunks, too
  for (size_t i = 0; i < specs.size(); ++i) {
    const Outcome a = run_alone(m, specs[i], alone);
    EXPECT_FALSE(a.ids.empty());
    expect_same(together[i], a, GetParam() + " request " + std::to_string(i));
  }
}

TEST_P(EngineVariants, APoolSoSmallThatSequencesArePreemptedStillGivesTheSameBits) {
  const ModelConfig c = small(GetParam());
  Model m(c, init_weights(c, 9, DType::F32, 0.3f), "init");
  const auto specs = random_specs(16, c.vocab, 7);
  EngineOptions eo;
  eo.kv_tokens = 640, eo.block_size = 16, eo.max_seqs = 16, eo.batch_tokens = 64;
  eo.cache_type = DType::BF16;
  EngineStats st;
  const auto together = run_together(m, specs, eo, &st);
  EXPECT_GT(st.preemptions, 0) << "the pool was meant to run short";
  for (size_t i = 0; i < specs.size(); ++i) {
    const Outcome a = run_alone(m, specs[i], eo);
    expect_same(together[i], a, GetParam() + " request " + std::to_string(i) + " (preempting run)");
  }
}

TEST_P(EngineVariants, LongSequencesAcrossAttentionChunksGiveTheSameBits) {
  // Over 512 keys a row's attention is merged from chunks: prompts of 500-900 tokens, cut
  // differently, decoding across the chunk boundary.
  const ModelConfig c = small(GetParam());
  Model m(c, init_weights(c, 8, DType::F32, 0.3f), "init");
  std::vector<Spec> specs(3);
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 500 + 200 * k; ++i) specs[size_t(k)].prompt.push_back((i * 17 + k * 5 + i / 7) % c.vocab);
    specs[size_t(k)].max_tokens = 20, specs[size_t(k)].sampling.temperature = 0.0f, specs[size_t(k)].arrival = k;
  }
  specs[0].prompt.resize(505);  // decodes from key 506 to 525: past 512
  EngineOptions eo;
  eo.kv_tokens = 4096, eo.batch_tokens = 200;
  const auto together = run_together(m, specs, eo);
  eo.batch_tokens = 513;
  for (size_t i = 0; i < specs.size(); ++i) expect_same(together[i], run_alone(m, specs[i], eo), GetParam() + " long " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Blocks, EngineVariants, ::testing::Values("qwen3", "mla", "gpt2"));

TEST(Engine, BatchedLogitsEqualSessionDecoding) {
  // mtb generate's Session runs the same batched forward: the same bits as the engine.
  for (const char* kind : {"qwen3", "mla"}) {
    const ModelConfig c = small(kind);
    Model m(c, init_weights(c, 3, DType::F32, 0.3f), "init");
    Spec sp;
    for (int i = 0; i < 150; ++i) sp.prompt.push_back((i * 13 + 5) % c.vocab);
    sp.max_tokens = 20, sp.sampling.temperature = 0.0f;
    EngineOptions eo;
    eo.batch_tokens = 64;
    const Outcome a = run_alone(m, sp, eo);
    SessionOptions so;
    so.context = 400, so.prefill_chunk = 100;
    Session s(m, so);
    const float* l = s.prefill(sp.prompt);
    std::vector<uint64_t> hashes;
    std::vector<int32_t> ids;
    for (int i = 0; i < sp.max_tokens; ++i) {
      hashes.push_back(hash_floats(l, c.vocab));
      const int32_t next = int32_t(std::max_element(l, l + c.vocab) - l);
      ids.push_back(next);
      if (i + 1 < sp.max_tokens) l = s.decode(next);
    }
    EXPECT_EQ(a.ids, ids) << kind;
    EXPECT_EQ(a.logit_hashes, hashes) << kind;
  }
}

TEST(Engine, ASharedPrefixIsPrefilledOnceAndGivesTheColdBits) {
  const ModelConfig c = small("qwen3");
  Model m(c, init_weights(c, 5, DType::F32, 0.3f), "init");
  Spec first, second;
  for (int i = 0; i < 200; ++i) first.prompt.push_back((i * 7 + 3) % c.vocab);
  second.prompt.assign(first.prompt.begin(), first.prompt.begin() + 192);
  for (int i = 0; i < 9; ++i) second.prompt.push_back((i * 11 + 1) % c.vocab);
  first.max_tokens = second.max_tokens = 6;
  first.sampling.temperature = second.sampling.temperature = 0.0f;
  EngineOptions eo;
  eo.kv_tokens = 2048, eo.block_size = 16, eo.batch_tokens = 128;
  Engine e(m, eo);
  Outcome o1, o2;
  e.submit(make_request(first, o1, c.vocab));
  e.run();
  const int64_t before = e.stats().prefilled_tokens;
  e.submit(make_request(second, o2, c.vocab));
  e.run();
  EXPECT_EQ(o2.reused, 192);
  EXPECT_EQ(e.stats().prefilled_tokens - before, 201 - 192) << "only the tokens after the shared prefix are prefilled";
  const Outcome cold = run_alone(m, second, eo);
  EXPECT_EQ(cold.reused, 0);
  expect_same(o2, cold, "prefix-shared request");

  // A prompt that is exactly whole cached blocks still computes its last token.
  Spec third;
  third.prompt.assign(first.prompt.begin(), first.prompt.begin() + 192);
  third.max_tokens = 3, third.sampling.temperature = 0.0f;
  Outcome o3;
  e.submit(make_request(third, o3, c.vocab));
  e.run();
  EXPECT_EQ(o3.reused, 176);
  expect_same(o3, run_alone(m, third, eo), "whole-block prompt");
}

TEST(Engine, RequestsSubmittedTogetherWaitForTheSharedPrefixInsteadOfComputingItTwice) {
  const ModelConfig c = small("qwen3");
  Model m(c, init_weights(c, 13, DType::F32, 0.3f), "init");
  std::vector<Spec> specs(4);
  for (int k = 0; k < 4; ++k) {
    for (int i = 0; i < 64; ++i) specs[size_t(k)].prompt.push_back((i * 7 + 5) % c.vocab);  // the shared prefix
    for (int i = 0; i < 8; ++i) specs[size_t(k)].prompt.push_back((i * 3 + k * 11 + 1) % c.vocab);
    specs[size_t(k)].max_tokens = 5, specs[size_t(k)].sampling.temperature = 0.0f;
  }
  EngineOptions eo;
  eo.kv_tokens = 2048, eo.batch_tokens = 512;
  EngineStats st;
  const auto together = run_together(m, specs, eo, &st);
  EXPECT_EQ(st.reused_tokens, 3 * 64) << "the first computes the prefix; the other three take its four blocks";
  EXPECT_EQ(st.prefilled_tokens, 72 + 3 * 8);
  for (size_t i = 0; i < specs.size(); ++i) expect_same(together[i], run_alone(m, specs[i], eo), "shared " + std::to_string(i));
}

TEST(Engine, EvictedBlocksAreNeverRead) {
  const ModelConfig c = small("qwen3");
  Model m(c, init_weights(c, 6, DType::F32, 0.3f), "init");
  EngineOptions eo;
  eo.kv_tokens = 512, eo.block_size = 16, eo.batch_tokens = 128, eo.max_seqs = 4;
  Engine e(m, eo);
  Spec a;
  for (int i = 0; i < 200; ++i) a.prompt.push_back((i * 5 + 2) % c.vocab);
  a.max_tokens = 4, a.sampling.temperature = 0.0f;
  Outcome oa;
  e.submit(make_request(a, oa, c.vocab));
  e.run();
  EXPECT_GT(e.pool().cached(), 0);
  // Other prompts fill the pool past its capacity: a's blocks are evicted and reused by them.
  std::vector<Outcome> others(6);
  for (int k = 0; k < 6; ++k) {
    Spec o;
    for (int i = 0; i < 250; ++i) o.prompt.push_back((i * 3 + k * 17 + 1) % c.vocab);
    o.max_tokens = 2, o.sampling.temperature = 0.0f;
    e.submit(make_request(o, others[size_t(k)], c.vocab));
  }
  e.run();
  EXPECT_GT(e.pool().evictions(), 0);
  Outcome again;
  e.submit(make_request(a, again, c.vocab));
  e.run();
  EXPECT_LT(again.reused, 192) << "some of a's blocks must have been evicted";
  expect_same(again, run_alone(m, a, eo), "after eviction");
}

TEST(Engine, BadInputIsRefusedOrWaits) {
  const ModelConfig c = small("qwen3");
  Model m(c, init_weights(c, 2, DType::F32, 0.3f), "init");
  auto refuses = [&](EngineOptions eo, const std::string& needle) {
    try {
      Engine e(m, eo);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  EngineOptions eo;
  eo.batch_tokens = 0;
  refuses(eo, "--batch-tokens");
  eo = {}, eo.batch_tokens = -5;
  refuses(eo, "--batch-tokens");
  eo = {}, eo.max_seqs = 0;
  refuses(eo, "--max-seqs");
  eo = {}, eo.kv_tokens = -1;
  refuses(eo, "--kv-budget");
  eo = {}, eo.context = 5000;
  refuses(eo, "past the model's maximum");

  eo = {};
  eo.kv_tokens = 256, eo.max_seqs = 2, eo.batch_tokens = 32;
  Engine e(m, eo);
  auto submit_refused = [&](Request r, const std::string& needle) {
    try {
      e.submit(std::move(r));
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  Request r;
  submit_refused(r, "empty prompt");
  r.prompt.assign(300, 1);
  submit_refused(r, "longer than the KV pool");
  r.prompt.assign(1300, 1);
  submit_refused(r, "longer than the context");
  r.prompt = {1, 2, 97};
  submit_refused(r, "token id 97");
  r.prompt = {1, -1};
  submit_refused(r, "token id -1");
  r.prompt = {1, 2}, r.max_tokens = -1;
  submit_refused(r, "max_tokens");
  r.max_tokens = 4, r.sampling.temperature = -1.0f;
  submit_refused(r, "temperature");
  EXPECT_TRUE(e.idle());

  // Five requests with --max-seqs 2: they wait their turn, none is dropped.
  std::vector<Outcome> out(5);
  for (int k = 0; k < 5; ++k) {
    Spec sp;
    sp.prompt = {k + 1, 2, 3, 4, 5};
    sp.max_tokens = 5, sp.sampling.temperature = 0.0f;
    e.submit(make_request(sp, out[size_t(k)], c.vocab));
  }
  EXPECT_EQ(e.waiting(), 5);
  e.step();
  EXPECT_EQ(e.running(), 2);
  EXPECT_EQ(e.waiting(), 3);
  e.run();
  for (const auto& o : out) {
    EXPECT_EQ(o.ids.size(), 5u);
    EXPECT_EQ(o.finish, FinishReason::Length);
  }

  // A request cancelled while running ends at once, its blocks back in the pool; one
  // cancelled while waiting never runs.
  Outcome oc, ow;
  Spec sp;
  sp.prompt.assign(100, 3);
  sp.max_tokens = 50;
  const int64_t id = e.submit(make_request(sp, oc, c.vocab));
  e.step();
  e.step();
  EXPECT_GT(e.pool().referenced(), 0);
  e.cancel(id);
  EXPECT_EQ(e.pool().referenced(), 0);
  EXPECT_EQ(oc.finish, FinishReason::Cancelled);
  const int64_t w = e.submit(make_request(sp, ow, c.vocab));
  e.cancel(w);
  e.cancel(w);     // twice: ignored
  e.cancel(9999);  // unknown: ignored
  e.run();
  EXPECT_EQ(ow.finish, FinishReason::Cancelled);
  EXPECT_TRUE(ow.ids.empty());
  EXPECT_TRUE(e.idle());

  // A sequence alone that outgrows the whole pool ends with "length", never a crash.
  Outcome ol;
  sp.prompt.assign(200, 4), sp.max_tokens = 500;
  e.submit(make_request(sp, ol, c.vocab));
  e.run();
  EXPECT_EQ(ol.finish, FinishReason::Length);
  EXPECT_EQ(ol.ids.size(), 256u - 200u + 1u);
  EXPECT_EQ(e.pool().referenced(), 0);
}

TEST(Engine, ACallbackThatThrowsCancelsItsRequestAndTheEngineGoesOn) {
  const ModelConfig c = small("qwen3");
  Model m(c, init_weights(c, 12, DType::F32, 0.3f), "init");
  EngineOptions eo;
  eo.kv_tokens = 1024, eo.batch_tokens = 64;
  Engine e(m, eo);
  Spec good, bad;
  for (int i = 0; i < 40; ++i) good.prompt.push_back((i * 3 + 1) % c.vocab), bad.prompt.push_back((i * 5 + 2) % c.vocab);
  good.max_tokens = bad.max_tokens = 12;
  good.sampling.temperature = bad.sampling.temperature = 0.0f;
  Outcome og;
  e.submit(make_request(good, og, c.vocab));
  Request r;
  r.prompt = bad.prompt, r.max_tokens = bad.max_tokens, r.sampling = bad.sampling;
  int seen = 0;
  r.on_token = [&seen](const TokenEvent& ev) {
    if (ev.token >= 0 && ++seen == 3) throw std::runtime_error("client went away");
  };
  e.submit(std::move(r));
  bool threw = false;
  while (!e.idle()) {
    try {
      e.step();
    } catch (const std::runtime_error&) {
      threw = true;
    }
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(seen, 3) << "the throwing request was cancelled: no more tokens";
  EXPECT_EQ(e.pool().referenced(), 0);
  expect_same(og, run_alone(m, good, eo), "the other request");
}

TEST(Engine, StepsDoNotAllocate) {
  const ModelConfig c = small("qwen3");
  Model m(c, init_weights(c, 4, DType::F32, 0.3f), "init");
  EngineOptions eo;
  eo.kv_tokens = 1024, eo.max_seqs = 4, eo.batch_tokens = 64;
  Engine e(m, eo);
  std::vector<Outcome> out(4);
  for (int k = 0; k < 4; ++k) {
    Spec sp;
    for (int i = 0; i < 20 + 10 * k; ++i) sp.prompt.push_back((i + k) % c.vocab);
    sp.max_tokens = 80;
    sp.sampling.temperature = 0.8f, sp.sampling.top_p = 0.9f, sp.sampling.seed = uint64_t(k);
    out[size_t(k)].ids.reserve(100), out[size_t(k)].logit_hashes.reserve(100);
    e.submit(make_request(sp, out[size_t(k)], c.vocab));
  }
  for (int i = 0; i < 5; ++i) e.step();  // prompts prefilled, decoding under way
  const long before = test::allocation_count();
  for (int i = 0; i < 40; ++i) e.step();
  EXPECT_EQ(test::allocation_count() - before, 0) << "allocations in 40 steps of 4 sequences";
  EXPECT_EQ(e.running(), 4);
}

}  // namespace
}  // namespace mtb
