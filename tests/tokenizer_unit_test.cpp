// Tokenizer unit tests on small tokenizer.json files written here: BPE merging, added and
// special tokens, the template, byte fallback, decoders, streaming decode, Rust's lossy
// UTF-8, the command line, and bad input (each a one-line mtb::Error).
// The comparison with Hugging Face's library on real tokenizers is tests/tokenizer/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "mtb/core/mapped_file.h"
#include "mtb/tokenizer/byte_level.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tokenizer/utf8.h"
#include "test_util.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// This test's own directory (ctest runs each test in its own process, in parallel).
std::string scratch_dir() { return test::scratch_dir(); }

std::string write_json(const std::string& name, const json& j) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream(path) << j.dump();
  return path;
}

std::string byte_char(int b) {
  std::string s;
  tok::utf8_append(s, tok::byte_level_alphabet().to_char[size_t(b)]);
  return s;
}

// A GPT-2 style tokenizer: the 256 byte characters (ids 0..255), a few merges, two added
// tokens (one special) and a BOS template.
json byte_level_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"l", "d"}, {"Ġwor", "ld"}};
  json m = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    m.push_back(a + " " + b);
  }
  json added = json::array();
  added.push_back({{"id", 265}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}, {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  added.push_back({{"id", 266}, {"content", "<tool>"}, {"special", false}, {"normalized", false}, {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  added.push_back({{"id", 267}, {"content", "<s>"}, {"special", true}, {"normalized", false}, {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {267}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", false}}},
  };
}

// A SentencePiece-style tokenizer: <unk>, byte fallback tokens, "▁" handling.
json sentencepiece_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const char* t : {"\xE2\x96\x81", "a", "b", "c"}) vocab[t] = next++;
  json merges = json::array();
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{{"\xE2\x96\x81", "a"}, {"b", "c"}, {"\xE2\x96\x81" "a", "bc"}}) {
    vocab[a + b] = next++;
    merges.push_back(json::array({a, b}));
  }
  json added = json::array();
  for (int id = 0; id < 3; ++id)
    added.push_back({{"id", id}, {"content", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"}, {"special", true}, {"normalized", false}, {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  const std::string sp = "\xE2\x96\x81";
  return {
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", sp}}, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}}, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab}, {"merges", merges}}},
  };
}

const Tokenizer& byte_level() {
  static const Tokenizer t = Tokenizer::load(write_json("byte_level.json", byte_level_json()));
  return t;
}

const Tokenizer& sentencepiece() {
  static const Tokenizer t = Tokenizer::load(write_json("sentencepiece.json", sentencepiece_json()));
  return t;
}

int32_t id(const Tokenizer& t, const std::string& token) {
  const auto i = t.token_to_id(token);
  EXPECT_TRUE(i.has_value()) << token;
  return i.value_or(-1);
}

TEST(Tokenizer, ByteLevelBpeMergesByRank) {
  const Tokenizer& t = byte_level();
  EXPECT_EQ(t.encode("hello world", false), (std::vector<int32_t>{id(t, "hello"), id(t, "Ġworld")}));
  // "hel" has no merge for "he"+"l": two symbols; bytes outside the merges stay bytes.
  EXPECT_EQ(t.encode("hel", false), (std::vector<int32_t>{id(t, "he"), id(t, "l")}));
  EXPECT_EQ(t.encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(t.encode("", true), std::vector<int32_t>{267});
  EXPECT_EQ(t.encode("hello", true), (std::vector<int32_t>{267, id(t, "hello")}));
  EXPECT_EQ(t.vocab_size(), 268);
  EXPECT_EQ(t.prefix_ids(), std::vector<int32_t>{267});
}

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  const Tokenizer& t = byte_level();
  const std::vector<int32_t> parsed = t.encode("hello<|end|>", false, true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{id(t, "hello"), 265}));
  const std::vector<int32_t> as_text = t.encode("hello<|end|>", false, false);
  EXPECT_GT(as_text.size(), 2u);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 265), 0);
  // A non-special added token is matched either way, as by the Rust library.
  EXPECT_EQ(t.encode("<tool>", false, false), std::vector<int32_t>{266});
  EXPECT_EQ(t.decode(parsed, false), "hello<|end|>");
  EXPECT_EQ(t.decode(parsed, true), "hello");
  EXPECT_EQ(t.decode(as_text, false), "hello<|end|>");
  EXPECT_TRUE(t.is_special(265));
  EXPECT_FALSE(t.is_special(266));
}

TEST(Tokenizer, NfcBeforeBytes) {
  const Tokenizer& t = byte_level();
  // e + combining acute is composed to U+00E9 before the bytes are taken.
  EXPECT_EQ(t.encode("e\xCC\x81", false), t.encode("\xC3\xA9", false));
  EXPECT_EQ(t.decode(t.encode("e\xCC\x81", false)), "\xC3\xA9");
}

TEST(Tokenizer, SentencePieceByteFallbackAndStrip) {
  const Tokenizer& t = sentencepiece();
  // "▁abc": the Prepend normalizer adds "▁"; merges make one token.
  EXPECT_EQ(t.encode("abc", true), (std::vector<int32_t>{1, id(t, "\xE2\x96\x81" "abc")}));
  // "é" is not in the vocab: its two bytes.
  const std::vector<int32_t> ids = t.encode("a \xC3\xA9", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{id(t, "\xE2\x96\x81" "a"), id(t, "\xE2\x96\x81"), id(t, "<0xC3>"), id(t, "<0xA9>")}));
  EXPECT_EQ(t.decode(ids), "a \xC3\xA9");  // the Strip decoder takes the leading space away
  // A lone continuation byte decodes to U+FFFD, one per byte.
  EXPECT_EQ(t.decode(std::vector<int32_t>{id(t, "a"), id(t, "<0xA9>"), id(t, "<0xA9>")}), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  // Unknown ids are skipped.
  EXPECT_EQ(t.decode(std::vector<int32_t>{id(t, "a"), 99999, id(t, "b")}), "ab");
}

TEST(Tokenizer, StreamDecoderNeverSplitsACharacter) {
  const Tokenizer& t = byte_level();
  const std::string text = "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80!";
  const std::vector<int32_t> ids = t.encode(text, false);
  ASSERT_GT(ids.size(), 8u);  // byte-level: multi-byte characters are several ids
  StreamDecoder sd(t);
  std::string all;
  int empty_steps = 0;
  for (const int32_t i : ids) {
    const std::string piece = sd.step(i);
    EXPECT_EQ(tok::utf8_invalid_offset(piece), std::string_view::npos) << "broken UTF-8 emitted";
    empty_steps += piece.empty();
    all += piece;
  }
  all += sd.finish();
  EXPECT_EQ(all, text);
  EXPECT_GT(empty_steps, 0);  // bytes of unfinished characters were held back
  // An unfinished character at the end comes out of finish() as U+FFFD.
  StreamDecoder cut(t);
  EXPECT_EQ(cut.step(id(t, byte_char(0xE4))), "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  // The pre-token cache is shared between threads.
  const Tokenizer t = Tokenizer::load(write_json("threads.json", byte_level_json()));
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("hello world " + std::to_string(i * 7919) + " h\xC3\xA9llo <|end|>");
  std::vector<std::vector<int32_t>> want;
  for (const std::string& s : texts) want.push_back(byte_level().encode(s));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) bad[size_t(k)] += t.encode(texts[i]) != want[i];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST(Tokenizer, AddedTokenIdsAsTheRustLibraryGivesThem) {
  // The file's ids are not trusted: a content in the vocab takes the vocab's id, others
  // follow the vocab in list order.
  json j = byte_level_json();
  j["added_tokens"][0]["id"] = 7;
  j["added_tokens"].push_back({{"id", 5}, {"content", "hello"}, {"special", false}, {"normalized", false}});
  const Tokenizer t = Tokenizer::load(write_json("ids.json", j));
  EXPECT_EQ(t.token_to_id("<|end|>"), 265);
  EXPECT_EQ(t.token_to_id("hello"), id(byte_level(), "hello"));
}

TEST(Tokenizer, LossyUtf8AsRust) {
  using tok::utf8_lossy;
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE4\xB8"), r);                // a cut-short sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xE4\xB8" "A"), r + "A");
  EXPECT_EQ(utf8_lossy("\xF0\x80\x80"), r + r + r);     // F0 80 is never valid
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);     // a surrogate
  EXPECT_EQ(utf8_lossy("\xFF\xC3\xA9"), r + "\xC3\xA9");
  EXPECT_EQ(tok::utf8_invalid_offset("ab\xC3\xA9\xFF"), 4u);
}

TEST(TokenizerErrors, InvalidUtf8NamesTheByteOffset) {
  EXPECT_ERROR_CONTAINS(byte_level().encode("ab\xC3\xA9\xFFz", false), "invalid UTF-8 at byte offset 4");
  EXPECT_ERROR_CONTAINS(byte_level().encode("\xC3", false), "invalid UTF-8 at byte offset 0");
}

TEST(TokenizerErrors, MissingFileOrDirectory) {
  EXPECT_ERROR_CONTAINS(Tokenizer::load(scratch_dir() + "/nope.json"), "nope.json: no such file or directory");
  const std::string empty = scratch_dir() + "/empty-model";
  fs::create_directories(empty);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(empty), "no tokenizer.json in this directory");
  // A directory holding tokenizer.json is fine.
  const std::string dir = scratch_dir() + "/model-dir";
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << byte_level_json().dump();
  EXPECT_EQ(Tokenizer::load(dir).path(), dir + "/tokenizer.json");
}

TEST(TokenizerErrors, UnsupportedComponentsNameFileAndComponent) {
  json j = byte_level_json();
  j["model"]["type"] = "Unigram";
  std::string path = write_json("unigram.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(path), path + ": model type 'Unigram' is not supported");
  j = byte_level_json();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  path = write_json("precompiled.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(path), path + ": normalizer type 'Precompiled' is not supported");
  j = byte_level_json();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Whitespace"}}})}};
  path = write_json("whitespace.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(path), "pre_tokenizer type 'Whitespace' is not supported");
  j = byte_level_json();
  j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  path = write_json("wordpiece.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(path), "decoder type 'WordPiece' is not supported");
  j = byte_level_json();
  j["model"]["dropout"] = 0.1;
  path = write_json("dropout.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(path), "dropout");
}

TEST(TokenizerErrors, BrokenFiles) {
  const std::string path = scratch_dir() + "/broken.json";
  std::ofstream(path) << "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,";
  EXPECT_ERROR_CONTAINS(Tokenizer::load(path), path + ": not valid JSON");
  json j = byte_level_json();
  j["model"]["merges"].push_back("zz qq");
  const std::string bad_merge = write_json("bad_merge.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(bad_merge), "'zz', which is not in the vocab");
  j = byte_level_json();
  j["model"]["merges"].push_back("a b c");
  const std::string three = write_json("three_part_merge.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(three), "is not two tokens separated by one space");
  j = byte_level_json();
  j["model"].erase("vocab");
  const std::string no_vocab = write_json("no_vocab.json", j);
  EXPECT_ERROR_CONTAINS(Tokenizer::load(no_vocab), "model.vocab is missing");
}

// The command line.
struct CliRun {
  int code;
  std::string out, err;
};

CliRun mtb_cli(const std::string& args) {
  const std::string dir = scratch_dir();
  const std::string cmd = test::binary_dir() + "/mtb " + args + " > " + dir + "/out.txt 2> " + dir + "/err.txt";
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_text_file(dir + "/out.txt"), read_text_file(dir + "/err.txt")};
}

TEST(TokenizerCli, TokenizeAndDetokenize) {
  const std::string file = write_json("cli.json", byte_level_json());
  const std::string hello = std::to_string(id(byte_level(), "hello"));
  CliRun r = mtb_cli("tokenize -m " + file + " --text 'hello<|end|>' --special");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[267," + hello + ",265]\n");
  r = mtb_cli("tokenize -m " + file + " --text 'hello' --no-add-special");
  EXPECT_EQ(r.out, "[" + hello + "]\n");
  r = mtb_cli("detokenize -m " + file + " --ids 267," + hello + ",265");
  EXPECT_EQ(r.out, "<s>hello<|end|>\n");
  r = mtb_cli("detokenize -m " + file + " --ids 267," + hello + ",265 --skip-special");
  EXPECT_EQ(r.out, "hello\n");
  const std::string in = scratch_dir() + "/lines.jsonl";
  std::ofstream(in) << "\"hello\"\n\"\"\n\"<|end|>\"\n";
  r = mtb_cli("tokenize -m " + file + " --jsonl --special --no-add-special < " + in);
  EXPECT_EQ(r.out, "[" + hello + "]\n[]\n[265]\n") << r.err;
  const std::string ids = scratch_dir() + "/ids.jsonl";
  std::ofstream(ids) << "[" + hello + "]\n[]\n[267,265]\n";
  r = mtb_cli("detokenize -m " + file + " --jsonl < " + ids);
  EXPECT_EQ(r.out, "\"hello\"\n\"\"\n\"<s><|end|>\"\n") << r.err;
}

TEST(TokenizerCli, BadInputIsOneLine) {
  const std::string file = write_json("cli.json", byte_level_json());
  auto expect_failure = [](const CliRun& r, const std::string& needle, int code) {
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  expect_failure(mtb_cli("tokenize -m " + file + " --text \"$(printf 'ab\\377')\""), "invalid UTF-8 at byte offset 2", 1);
  expect_failure(mtb_cli("tokenize -m " + scratch_dir() + "/missing --text hi"), "no such file or directory", 1);
  expect_failure(mtb_cli("tokenize -m " + file), "give --text TEXT or --jsonl", 1);
  expect_failure(mtb_cli("detokenize -m " + file + " --ids 1,x"), "is not a token id", 1);
  const std::string in = scratch_dir() + "/bad.jsonl";
  std::ofstream(in) << "\"ok\"\n[1]\n";
  expect_failure(mtb_cli("tokenize -m " + file + " --jsonl < " + in), "stdin line 2: expected a JSON string", 1);
}

}  // namespace
}  // namespace mtb
