// The `mtb` command line end to end: outputs, and one-line errors with non-zero exits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mtb/core/mapped_file.h"
#include "mtb/io/hf.h"
#include "mtb/io/model_file.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;

using Result = test::CliResult;
Result mtb_cli(const std::string& args) { return test::run_mtb(args); }

// A failed command: non-zero exit and exactly one line on stderr containing `needle`.
void expect_failure(const std::string& args, const std::string& needle, int code = 1) {
  const Result r = mtb_cli(args);
  EXPECT_EQ(r.code, code) << args << "\nstderr: " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr: " << r.err;
}

std::string example_dir() {
  const std::string dir = test::scratch_dir() + "/model";
  if (!fs::exists(dir + "/config.json")) {
    const Result r = mtb_cli("init --preset example-3m --seed 5 -o " + dir);
    EXPECT_EQ(r.code, 0) << r.err;
  }
  return dir;
}

TEST(Cli, InfoPrintsTheChapterCount) {
  const Result r = mtb_cli("info --preset example-3m");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("parameters: 3,283,456"), std::string::npos) << r.out;
  const Result j = mtb_cli("info --preset example-3m --json");
  EXPECT_NE(j.out.find("\"total\": 3283456"), std::string::npos) << j.out;
  const Result m = mtb_cli("info " + example_dir());
  EXPECT_NE(m.out.find("parameters: 3,283,456"), std::string::npos) << m.out;
}

TEST(Cli, LogitsFileHoldsEveryPositionAsFloat32) {
  const std::string dir = example_dir();
  const std::string out = test::scratch_dir() + "/logits.f32";
  const Result r = mtb_cli("logits -m " + dir + " --ids 1,2,3,999 -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string bytes = read_text_file(out);
  ASSERT_EQ(bytes.size(), 4u * 1000u * 4u);
  const auto want = open_model(dir).forward({1, 2, 3, 999});
  EXPECT_EQ(std::memcmp(bytes.data(), want.data(), bytes.size()), 0);
}

TEST(Cli, BadArgumentsAndInputsFailWithOneLine) {
  const std::string dir = example_dir();
  expect_failure("", "subcommand", 2);
  expect_failure("frobnicate", "frobnicate", 2);
  expect_failure("info --preset nope", "unknown preset 'nope'");
  expect_failure("info " + dir + "/missing", "no such file or directory");
  expect_failure("info --preset example-3m --config x.json", "exactly one");
  expect_failure("init --preset example-3m --dtype f64 -o " + test::scratch_dir() + "/x", "--dtype", 2);
  expect_failure("init --preset example-3m", "--output", 2);
  expect_failure("logits -m " + dir + " --ids 1,x -o /tmp/l.f32", "'x' is not a token id");
  expect_failure("logits -m " + dir + " --ids 1,-2 -o /tmp/l.f32", "'-2' is not a token id");
  expect_failure("logits -m " + dir + " --ids 1,1000 -o /tmp/l.f32", "token id 1000 at position 1 is outside the vocabulary");
  const std::string cfg = test::scratch_dir() + "/bad-config.json";
  std::ofstream(cfg) << R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 6, "num_key_value_heads": 4, "intermediate_size": 96})";
  expect_failure("info --config " + cfg, "n_heads (6) is not divisible by n_kv_heads (4)");
  const std::string never = test::scratch_dir() + "/never";
  expect_failure("init --config " + cfg + " -o " + never, "bad-config.json");
  EXPECT_FALSE(fs::exists(never));
}

TEST(Cli, GenerateStreamsIdsAndRefusesBadRequests) {
  const std::string dir = example_dir();  // context 1024, vocab 1000
  const Result ok = mtb_cli("generate -m " + dir + " --prompt-ids 1,2,3 -n 5 --seed 3 --print-ids");
  ASSERT_EQ(ok.code, 0) << ok.err;
  std::istringstream in(ok.out);
  int n = 0;
  for (int id; in >> id; ++n) EXPECT_TRUE(id >= 0 && id < 1000);
  EXPECT_EQ(n, 5);
  EXPECT_NE(ok.err.find("decode: 5 tokens"), std::string::npos) << ok.err;
  // The pool holds whole blocks of 16 token rows: 8 tokens of context take one.
  EXPECT_NE(ok.err.find("KV cache: 32,768 B (32 KiB) for 8 tokens"), std::string::npos) << ok.err;
  EXPECT_EQ(mtb_cli("generate -m " + dir + " --prompt-ids 1,2,3 -n 5 --seed 3").out, ok.out);  // same seed, same ids
  std::string long_prompt = "1";
  for (int i = 0; i < 1024; ++i) long_prompt += ",1";
  expect_failure("generate -m " + dir + " --prompt-ids " + long_prompt + " -n 1", "longer than the model's context of 1024");
  expect_failure("generate -m " + dir + " --prompt-ids 1,2 -n 1023", "exceed the model's context of 1024");
  expect_failure("generate -m " + dir + " --prompt-ids 1,2 --temperature -1", "--temperature must be >= 0");
  expect_failure("generate -m " + dir + " --prompt-ids 1,2 --top-p 0", "--top-p must be in (0, 1]");
  expect_failure("generate -m " + dir + " --prompt-ids 1,2 --top-p 1.5", "--top-p must be in (0, 1]");
  expect_failure("generate -m " + dir + " --prompt-ids 1,2 -n -3", "-n must not be negative");
  expect_failure("generate -m " + dir + " --prompt-ids 1,1000", "token id 1000 at prompt position 1");
  expect_failure("generate -m " + dir + " --prompt-ids 1 --cache-type f64", "--cache-type", 2);
}

TEST(Cli, KvPlannerPrintsTheChaptersNumbers) {
  const Result r = mtb_cli("kv --preset llama3-70b --context 131072 --dtype bf16 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"\"bytes_per_token\": 2621440", "\"bytes_per_token\": 327680", "\"bytes_per_token\": 40960",
                           "\"bytes_at_context\": 343597383680", "\"bytes_at_context\": 42949672960",
                           "\"bytes_at_context\": 5368709120"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  const Result t = mtb_cli("kv --preset deepseek-v3 --context 131072 --budget 24GiB");
  ASSERT_EQ(t.code, 0) << t.err;
  for (const char* want : {"70,272 B (68.6 KiB)", "8.58 GiB", "4,997,120 B (4.77 MiB)", "71.11x", "366,715"})
    EXPECT_NE(t.out.find(want), std::string::npos) << want << "\n" << t.out;
  expect_failure("kv --preset llama3-70b --budget lots", "'lots' is not a size");
  expect_failure("kv --preset llama3-70b --dtype fp64", "'fp64' is not an element type");
  expect_failure("kv", "exactly one");
}

TEST(Cli, BatchedBenchReportsEachParallelismAndTheSharedPrefix) {
  const std::string dir = example_dir();
  const Result r = mtb_cli("bench -m " + dir + " --parallel 1,3 -p 8 -n 4 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array() && j.size() == 2) << r.out;
  for (int i = 0; i < 2; ++i) {
    const int b = i == 0 ? 1 : 3;
    EXPECT_EQ(j[i]["parallel"], b);
    EXPECT_GT(j[i]["pp_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(j[i]["tg_tokens_per_s"].get<double>(), 0);
    EXPECT_EQ(j[i]["prefilled_tokens"], 8 * b) << "every prompt token computed once";
    EXPECT_EQ(j[i]["reused_tokens"], 0);
    EXPECT_EQ(j[i]["kv_blocks_peak"], b) << "8 prompt + 4 generated tokens fit one block of 16 each";
  }
  // Three sequences sharing a 32-token prefix: the first prefills it, the other two reuse
  // its two blocks and prefill only their own 8 tokens.
  const Result s = mtb_cli("bench -m " + dir + " --parallel 3 -p 8 -n 2 --shared-prefix 32 --json");
  ASSERT_EQ(s.code, 0) << s.err;
  const auto k = nlohmann::json::parse(s.out);
  EXPECT_EQ(k[0]["reused_tokens"], 64) << s.out;
  EXPECT_EQ(k[0]["prefilled_tokens"], 40 + 8 + 8) << s.out;
  // Bad arguments: one line each.
  expect_failure("bench -m " + dir + " --parallel 0", "--parallel counts must be positive");
  expect_failure("bench -m " + dir + " --parallel 2 -p 0", "-p must be positive");
  expect_failure("bench -m " + dir + " --parallel 2 --batch-tokens -3", "--batch-tokens must not be negative");
  expect_failure("bench -m " + dir + " --parallel 2 --kv-budget lots", "'lots' is not a size");
  expect_failure("bench -m " + dir + " --parallel 2 --kv-budget 0tokens", "not a positive count of tokens");
  expect_failure("bench -m " + dir + " --parallel 2 -d 5", "-d does not apply");
  expect_failure("bench --parallel 2", "give -m MODEL");
  // A pool too small for one sequence's prompt is refused, not a crash.
  expect_failure("bench -m " + dir + " --parallel 2 -p 40 --kv-budget '32 tokens'", "longer than the KV pool");
}

}  // namespace
}  // namespace mtb
