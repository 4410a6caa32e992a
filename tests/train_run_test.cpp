// Training runs (train/run.h) and `mtb train`: exact resume, atomic checkpoints, the run
// directory as a model directory, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "mtb/core/mapped_file.h"
#include "mtb/io/hf.h"
#include "mtb/io/safetensors.h"
#include "mtb/model/model.h"
#include "mtb/tokenizer/byte_level.h"
#include "mtb/train/run.h"
#include "test_util.h"

namespace mtb::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A Qwen3-style block (Hugging Face can express it): RMSNorm, SwiGLU, RoPE, GQA, QK-norm.
ModelConfig tiny_modern() {
  ModelConfig c;
  c.family = "qwen3";
  c.vocab = 48, c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.d_ff = 48;
  c.qk_norm = true, c.max_context = 64;
  return c;
}

// The ladder's second rung: GPT-2's block with RMSNorm, no biases, untied (mtb's config form).
ModelConfig tiny_hybrid() {
  ModelConfig c;
  c.family = "gpt2";
  c.vocab = 48, c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 8, c.d_ff = 64;
  c.norm = NormKind::RMSNorm, c.ffn = FfnKind::GeluMlp, c.position = PositionKind::Learned, c.max_context = 32;
  return c;
}

// A stream with structure to learn: runs of counting with noise, seeded.
TokenData tiny_data(int vocab, size_t n_train = 4000, size_t n_val = 600) {
  std::mt19937 rng(11);
  auto stream = [&](size_t n) {
    std::vector<int32_t> s(n);
    int32_t v = 0;
    for (auto& t : s) {
      v = (rng() % 8 == 0) ? int32_t(rng() % uint32_t(vocab)) : (v + 1) % vocab;
      t = v;
    }
    return s;
  };
  TokenData d;
  d.train = stream(n_train);
  d.val = stream(n_val);
  return d;
}

TrainOptions tiny_options() {
  TrainOptions o;
  o.steps = 8, o.batch = 3, o.seq_len = 16, o.grad_accum = 2;
  o.lr = 3e-3, o.min_lr = 3e-4, o.warmup = 2, o.eval_every = 3, o.eval_batches = 2, o.seed = 5;
  return o;
}

// This test's scratch directory, emptied (a rerun must not find the last run's directories).
std::string fresh_dir() {
  const std::string dir = test::scratch_dir();
  for (const auto& e : fs::directory_iterator(dir)) fs::remove_all(e.path());
  return dir;
}

RunSettings quiet_settings(const std::string& dir) {
  RunSettings s;
  s.dir = dir;
  s.quiet = true;
  return s;
}

std::string bytes_of(const std::string& path) { return read_text_file(path); }

// metrics.jsonl without the timing fields.
std::vector<json> metrics(const std::string& dir) {
  std::vector<json> out;
  std::istringstream in(read_text_file(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    j.erase("tokens_per_s"), j.erase("elapsed_s");
    out.push_back(j);
  }
  return out;
}

void expect_same_run(const std::string& a, const std::string& b) {
  EXPECT_EQ(bytes_of(a + "/model.safetensors"), bytes_of(b + "/model.safetensors"));
  EXPECT_EQ(bytes_of(a + "/optimizer.safetensors"), bytes_of(b + "/optimizer.safetensors"));
  EXPECT_EQ(metrics(a), metrics(b));
  json sa = json::parse(read_text_file(a + "/trainer_state.json")), sb = json::parse(read_text_file(b + "/trainer_state.json"));
  for (const char* k : {"step", "tokens", "rng_state", "optimizer_steps", "config_hash", "data_hash"}) EXPECT_EQ(sa[k], sb[k]) << k;
}

class Resume : public ::testing::TestWithParam<bool> {
 protected:
  ModelConfig config() const { return GetParam() ? tiny_hybrid() : tiny_modern(); }
};

TEST_P(Resume, StopAndResumeIsBitIdenticalToStraight) {
  const std::string dir = fresh_dir();
  const ModelConfig c = config();
  const TokenData d = tiny_data(c.vocab);
  const TrainOptions o = tiny_options();
  const RunResult straight = run_training(c, d, o, quiet_settings(dir + "/straight"));
  EXPECT_TRUE(straight.finished);
  EXPECT_EQ(straight.step, 8);
  EXPECT_EQ(straight.tokens, 8 * 3 * 16 * 2);

  RunSettings first = quiet_settings(dir + "/resumed");
  first.stop_at = 5;  // not at a validation step
  const RunResult half = run_training(c, d, o, first);
  EXPECT_FALSE(half.finished);
  EXPECT_EQ(half.step, 5);
  EXPECT_EQ(read_run_state(dir + "/resumed").step, 5);
  RunSettings second = quiet_settings(dir + "/resumed");
  second.resume = true;
  const RunResult rest = run_training(c, d, o, second);
  EXPECT_TRUE(rest.finished);
  EXPECT_EQ(rest.train_loss, straight.train_loss);
  EXPECT_EQ(rest.val_loss, straight.val_loss);
  expect_same_run(dir + "/straight", dir + "/resumed");

  // The metrics: one train line per step, validation at 0, 3, 6 and the end; loss falls.
  const std::vector<json> m = metrics(dir + "/straight");
  ASSERT_EQ(m.size(), 8u + 4u);
  EXPECT_EQ(m.front()["step"], 0);
  EXPECT_TRUE(m.front().contains("val_loss"));
  EXPECT_NEAR(m.front()["val_loss"].get<double>(), std::log(double(c.vocab)), 0.1);  // near-uniform at init
  EXPECT_LT(straight.val_loss, m.front()["val_loss"].get<double>() - 0.2);
}

INSTANTIATE_TEST_SUITE_P(Train, Resume, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Hybrid" : "Qwen3"; });

TEST(TrainRun, RunDirectoryIsAModelDirectory) {
  const std::string dir = fresh_dir() + "/run";
  const ModelConfig c = tiny_modern();
  TrainOptions o = tiny_options();
  o.steps = 2;
  run_training(c, tiny_data(c.vocab), o, quiet_settings(dir));
  const LoadedModel m = load_hf_dir(dir);  // optimizer.safetensors is not taken for weights
  EXPECT_EQ(config_hash(m.config), config_hash(c));
  EXPECT_FALSE(m.tensors.contains("exp_avg"));
  Model model(m.config, m.tensors, dir);
  const std::vector<float> logits = model.forward(std::vector<int32_t>{1, 2, 3});
  ASSERT_EQ(logits.size(), 3 * size_t(c.vocab));  // every position
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
  EXPECT_FALSE(fs::exists(dir + "/.checkpoint.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/.checkpoint.ready"));
}

TEST(TrainRun, ConfigJsonRoundTrips) {
  for (const ModelConfig& c : {tiny_modern(), tiny_hybrid(), preset("example-3m"), preset("gpt2-124m")}) {
    const ModelConfig back = config_from_json(config_to_json(c), "test");
    EXPECT_EQ(config_to_json(back), config_to_json(c));
    EXPECT_EQ(count_params(back).total(), count_params(c).total());
  }
  EXPECT_ERROR_CONTAINS(config_from_json(json{{"vocab", 10}}, "cfg.json"), "cfg.json: missing key 'd_model'");
  json j = config_to_json(tiny_modern());
  j["norm"] = "batchnorm";
  EXPECT_ERROR_CONTAINS(config_from_json(j, "cfg.json"), "key 'norm' is 'batchnorm'");
  j = config_to_json(tiny_modern());
  j["dmodel"] = 3;
  EXPECT_ERROR_CONTAINS(config_from_json(j, "cfg.json"), "unknown key 'dmodel'");
}

// A kill before the commit leaves the old checkpoint; one after it is finished on the next
// open. Either way the resumed run equals the straight one.
TEST(TrainRun, CheckpointsSurviveAKillAtAnyPhase) {
  const std::string dir = fresh_dir();
  const ModelConfig c = tiny_modern();
  const TokenData d = tiny_data(c.vocab);
  const TrainOptions o = tiny_options();
  run_training(c, d, o, quiet_settings(dir + "/straight"));
  struct Killed {};
  for (const std::string phase : {"written", "committed", "moved:config.json", "moved:optimizer.safetensors"}) {
    SCOPED_TRACE(phase);
    const std::string run = dir + "/" + phase.substr(0, phase.find(':')) + std::to_string(phase.size());
    RunSettings s = quiet_settings(run);
    s.hooks.on_checkpoint = [&](const std::string& p) {
      if (p == phase && fs::exists(run + "/trainer_state.json") && read_text_file(run + "/trainer_state.json").find("\"step\": 3") != std::string::npos)
        throw Killed{};  // dies while writing step 6 over step 3
    };
    EXPECT_THROW(run_training(c, d, o, s), Killed);
    const int64_t expect = phase == "written" ? 3 : 6;
    EXPECT_EQ(read_run_state(run).step, expect);  // recovers first
    EXPECT_EQ(load_hf_dir(run).config.vocab, c.vocab);
    RunSettings again = quiet_settings(run);
    again.resume = true;
    run_training(c, d, o, again);
    expect_same_run(dir + "/straight", run);
  }
}

TEST(TrainRun, MoreStepsOnResumeWithAConstantRate) {
  const std::string dir = fresh_dir();
  const ModelConfig c = tiny_modern();
  const TokenData d = tiny_data(c.vocab);
  TrainOptions o = tiny_options();
  o.min_lr = o.lr, o.warmup = 0, o.eval_every = 4, o.steps = 8;
  run_training(c, d, o, quiet_settings(dir + "/straight"));
  TrainOptions first = o;
  first.steps = 4;
  run_training(c, d, first, quiet_settings(dir + "/two"));
  RunSettings s = quiet_settings(dir + "/two");
  s.resume = true;
  run_training(c, d, o, s);
  expect_same_run(dir + "/straight", dir + "/two");
}

TEST(TrainRun, BadInput) {
  const std::string dir = fresh_dir();
  const ModelConfig c = tiny_modern();
  const TokenData d = tiny_data(c.vocab);
  const TrainOptions o = tiny_options();

  TokenData small = d;
  small.train.resize(3 * 17 - 1);
  EXPECT_ERROR_CONTAINS(run_training(c, small, o, quiet_settings(dir + "/a")), "fewer than one batch");
  small = d;
  small.val.resize(10);
  EXPECT_ERROR_CONTAINS(run_training(c, small, o, quiet_settings(dir + "/a")), "validation split has 10 tokens");
  TokenData wide = d;
  wide.train[7] = c.vocab;
  EXPECT_ERROR_CONTAINS(run_training(c, wide, o, quiet_settings(dir + "/a")), "token id 48 is outside the config's vocabulary of 48");
  TrainOptions long_seq = o;
  long_seq.seq_len = 65;
  EXPECT_ERROR_CONTAINS(run_training(c, d, long_seq, quiet_settings(dir + "/a")), "--seq-len 65 exceeds");
  TrainOptions bad = o;
  bad.batch = 0;
  EXPECT_ERROR_CONTAINS(run_training(c, d, bad, quiet_settings(dir + "/a")), "--batch must be at least 1");

  // A non-empty directory without --resume: refused, nothing touched.
  fs::create_directories(dir + "/full");
  write_file_atomic(dir + "/full/keep.txt", "mine", 4);
  EXPECT_ERROR_CONTAINS(run_training(c, d, o, quiet_settings(dir + "/full")), "exists and is not empty");
  EXPECT_EQ(read_text_file(dir + "/full/keep.txt"), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir + "/full"), fs::directory_iterator()), 1);
  RunSettings r = quiet_settings(dir + "/full");
  r.resume = true;
  EXPECT_ERROR_CONTAINS(run_training(c, d, o, r), "no trainer_state.json");

  // NaN loss: stops naming the step; the last checkpoint stays.
  RunSettings nan = quiet_settings(dir + "/nan");
  nan.hooks.on_loss = [](int64_t step, double& loss) {
    if (step == 4) loss = std::nan("");
  };
  EXPECT_ERROR_CONTAINS(run_training(c, d, o, nan), "step 4: the training loss is nan");
  EXPECT_EQ(read_run_state(dir + "/nan").step, 3);
  TrainOptions huge = o;
  huge.lr = 1e30, huge.min_lr = 0, huge.warmup = 0, huge.clip = 0;
  EXPECT_ERROR_CONTAINS(run_training(c, d, huge, quiet_settings(dir + "/huge")), "diverged");
  EXPECT_EQ(read_run_state(dir + "/huge").step, 0);

  // Resume with another config, other options, other data.
  TrainOptions two = o;
  two.steps = 2;
  run_training(c, d, two, quiet_settings(dir + "/run"));
  RunSettings res = quiet_settings(dir + "/run");
  res.resume = true;
  ModelConfig wider = c;
  wider.d_model = 48;
  EXPECT_ERROR_CONTAINS(run_training(wider, d, two, res), "different config (d_model 32 in the checkpoint, 48 given)");
  TrainOptions other = two;
  other.lr = 1e-2;
  EXPECT_ERROR_CONTAINS(run_training(c, d, other, res), "options differ from the checkpoint's (lr");
  TokenData other_data = tiny_data(c.vocab, 4001);
  EXPECT_ERROR_CONTAINS(run_training(c, other_data, two, res), "other tokens");
  EXPECT_EQ(read_run_state(dir + "/run").step, 2);  // untouched
}

// ---- the command line ----------------------------------------------------------------------

using Cli = test::CliResult;
Cli mtb_cli(const std::string& args) { return test::run_mtb(args); }

void expect_failure(const std::string& args, const std::string& needle) {
  const Cli r = mtb_cli(args);
  EXPECT_EQ(r.code, 1) << args << "\nstderr: " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr: " << r.err;
}

// A byte-level tokenizer.json without merges: 256 byte tokens and <|endoftext|> (257 ids).
std::string write_byte_tokenizer(const std::string& dir) {
  json vocab = json::object();
  const auto& a = tok::byte_level_alphabet();
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = a.to_char[b];
    std::string s;
    if (cp < 0x80) s += char(cp);
    else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    vocab[s] = b;
  }
  json bl{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json j{{"version", "1.0"},
         {"truncation", nullptr},
         {"padding", nullptr},
         {"added_tokens",
          {{{"id", 256}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
            {"normalized", false}, {"special", true}}}},
         {"normalizer", nullptr},
         {"pre_tokenizer", bl},
         {"post_processor", nullptr},
         {"decoder", bl},
         {"model",
          {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
           {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
           {"merges", json::array()}}}};
  const std::string path = dir + "/tokenizer.json";
  const std::string text = j.dump();
  write_file_atomic(path, text.data(), text.size());
  return path;
}

// Paragraphs of words from a small list, seeded.
std::string write_corpus(const std::string& dir, int paragraphs, const std::string& name = "corpus.txt") {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "it"};
  std::mt19937 rng(3);
  std::string text;
  for (int p = 0; p < paragraphs; ++p) {
    for (int w = 0; w < 12; ++w) text += std::string(w ? " " : "") + words[rng() % 11];
    text += ".\n\n";
  }
  const std::string path = dir + "/" + name;
  write_file_atomic(path, text.data(), text.size());
  return path;
}

std::string write_config(const std::string& dir, int vocab, const std::string& name = "tiny.json") {
  ModelConfig c = tiny_modern();
  c.vocab = vocab;
  const std::string text = config_to_json(c).dump(2);
  const std::string path = dir + "/" + name;
  write_file_atomic(path, text.data(), text.size());
  return path;
}

const char* kSmall = " --steps 6 --batch 2 --seq-len 16 --eval-every 3 --eval-batches 2 --warmup 1 --quiet --threads 1";

TEST(TrainCli, TrainsResumesAndTheRunServesGenerate) {
  const std::string dir = fresh_dir();
  const std::string tok = write_byte_tokenizer(dir), corpus = write_corpus(dir, 200), cfg = write_config(dir, 257);
  const std::string base = " --config " + cfg + " --tokenizer " + tok + kSmall;
  const std::string common = base + " --corpus " + corpus;
  const Cli a = mtb_cli("train" + common + " -o " + dir + "/a");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("step 6/6"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("unigram entropy"), std::string::npos) << a.out;
  const Cli b1 = mtb_cli("train" + common + " --stop-at 2 -o " + dir + "/b");
  ASSERT_EQ(b1.code, 0) << b1.err;
  const Cli b2 = mtb_cli("train --resume --quiet -o " + dir + "/b");
  ASSERT_EQ(b2.code, 0) << b2.err;
  expect_same_run(dir + "/a", dir + "/b");
  EXPECT_EQ(read_text_file(dir + "/a/tokenizer.json"), read_text_file(tok));

  const Cli info = mtb_cli("info " + dir + "/a");
  EXPECT_EQ(info.code, 0) << info.err;
  const Cli gen = mtb_cli("generate -m " + dir + "/a --prompt-ids 116,104 -n 5 --temperature 0 --ignore-eos");
  EXPECT_EQ(gen.code, 0) << gen.err;

  // Refusals.
  expect_failure("train" + common + " -o " + dir + "/a", "exists and is not empty");
  expect_failure("train --resume --preset example-3m --vocab-from-tokenizer --quiet -o " + dir + "/a", "different config");
  expect_failure("train --config " + write_config(dir, 300, "v300.json") + " --tokenizer " + tok + " --corpus " + corpus + kSmall + " -o " + dir + "/c",
                 "the config's vocab (300");
  EXPECT_FALSE(fs::exists(dir + "/c"));
  expect_failure("train" + base + " --corpus " + dir + "/nowhere.txt -o " + dir + "/d", dir + "/nowhere.txt");
  write_file_atomic(dir + "/empty.txt", "", 0);
  expect_failure("train" + base + " --corpus " + dir + "/empty.txt -o " + dir + "/e", "no documents");
  expect_failure("train" + base + " --corpus " + write_corpus(dir, 1, "one.txt") + " -o " + dir + "/f", "fewer than");
  expect_failure("train" + common + " --lr 1e30 --min-lr 0 --clip 0 -o " + dir + "/g", "diverged");
}

}  // namespace
}  // namespace mtb::train
