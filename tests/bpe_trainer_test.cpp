// `mtb tokenizer train`'s BPE trainer: merges derived by hand on a tiny corpus (counts, the
// tie-break, early stop), the ids of special tokens, the tokenizer.json it writes read back
// by mtb's Tokenizer (exact ids, round trip), bad input. The comparison with Hugging Face's
// library is tests/tokenizer/trained_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "mtb/core/mapped_file.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tokenizer/trainer.h"
#include "test_util.h"

namespace mtb::tok {
namespace {

std::string write_tokenizer(const TrainedBpe& m) {
  const std::string path = test::scratch_dir() + "/tokenizer.json";
  const std::string json = bpe_tokenizer_json(m);
  write_file_atomic(path, json.data(), json.size());
  return path;
}

std::vector<std::pair<std::string, std::string>> merge_strings(const TrainedBpe& m) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [a, b] : m.merges) out.emplace_back(m.tokens[size_t(a)], m.tokens[size_t(b)]);
  return out;
}

// "aaab aab ab" splits into "aaab", " aab", " ab". Pair counts: (a,a) 3 = (a,b) 3, the tie
// goes to the smaller pair (97,97) -> "aa" = 256. Then (a,b) 2 -> "ab" = 257. Then all pairs
// count 1: (aa,ab) (" ",aa) (aa,b) (" ",ab); the smallest is (32, 256) -> " aa" = 258, then
// (32, 257) -> " ab", (256, 257) -> "aaab", (258, 98) -> " aab", and nothing is left.
TEST(BpeTrainer, MergesDerivedByHand) {
  BpeTrainOptions opt;
  opt.vocab_size = 260;  // 256 + 3 merges + <|endoftext|>
  const TrainedBpe m = train_bpe({"aaab aab ab"}, opt);
  EXPECT_TRUE(m.complete);
  EXPECT_EQ(merge_strings(m), (std::vector<std::pair<std::string, std::string>>{{"a", "a"}, {"a", "b"}, {" ", "aa"}}));
  EXPECT_EQ(m.merges[0], (std::pair<int32_t, int32_t>{97, 97}));
  EXPECT_EQ(m.merges[2], (std::pair<int32_t, int32_t>{32, 256}));
  ASSERT_EQ(m.vocab_size(), 260);
  EXPECT_EQ(m.tokens[256], "aa");
  EXPECT_EQ(m.tokens[259], "<|endoftext|>");
  EXPECT_EQ(m.pre_tokens, 3);
  EXPECT_EQ(m.words, 3);

  // Asking for more than the text allows stops after the 6 possible merges.
  opt.vocab_size = 1000;
  opt.special_tokens = {"<|endoftext|>", "<|pad|>"};
  const TrainedBpe all = train_bpe({"aaab aab ab"}, opt);
  EXPECT_FALSE(all.complete);
  EXPECT_EQ(merge_strings(all), (std::vector<std::pair<std::string, std::string>>{
                                    {"a", "a"}, {"a", "b"}, {" ", "aa"}, {" ", "ab"}, {"aa", "ab"}, {" aa", "b"}}));
  EXPECT_EQ(all.vocab_size(), 256 + 6 + 2);
  EXPECT_EQ(all.tokens[262], "<|endoftext|>");
  EXPECT_EQ(all.tokens[263], "<|pad|>");
}

TEST(BpeTrainer, CountsWeighByWordFrequency) {
  // "cd", " cd" x2, " ab" x2: (c,d) 3 beats (32,97), (97,98) and (32,99), 2 each, although
  // it is the largest pair; then " cd" and " ab" count 2 each and the tie goes to (32, 97).
  BpeTrainOptions opt;
  opt.vocab_size = 258;
  opt.special_tokens = {};
  const TrainedBpe m = train_bpe({"cd cd cd ab ab"}, opt);
  EXPECT_EQ(merge_strings(m), (std::vector<std::pair<std::string, std::string>>{{"c", "d"}, {" ", "a"}}));
  EXPECT_EQ(m.vocab_size(), 258);
}

TEST(BpeTrainer, TokenizerJsonReadBackByMtb) {
  const std::vector<std::string> docs = {
      "aaab aab ab", "Hello, world! 12345 don't\n\n  indented\ttab", "caf\xC3\xA9 \xE2\x82\xAC 3.14", "aaab aab ab"};
  BpeTrainOptions opt;
  opt.vocab_size = 300;
  const TrainedBpe m = train_bpe(docs, opt);
  const Tokenizer t = Tokenizer::load(write_tokenizer(m));
  EXPECT_EQ(t.vocab_size(), m.vocab_size());
  const int32_t eot = m.vocab_size() - 1;
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), eot);
  EXPECT_TRUE(t.is_special(eot));
  // Byte ids are the bytes; learned tokens are their merges.
  EXPECT_EQ(t.encode("\x01", false), (std::vector<int32_t>{1}));
  EXPECT_EQ(t.token_to_id("\xC4\xA0"), 32);  // "Ġ", the space
  for (const std::string& d : docs) EXPECT_EQ(t.decode(t.encode(d, false)), d);
  // The special token in text is one id when parsed, bytes when not.
  EXPECT_EQ(t.encode("<|endoftext|>", false, true), (std::vector<int32_t>{eot}));
  EXPECT_GT(t.encode("<|endoftext|>", false, false).size(), 1u);
  // Nothing is added around a sequence.
  EXPECT_EQ(t.encode("a", true), (std::vector<int32_t>{97}));

  // The hand-derived merges give exactly these ids.
  opt.vocab_size = 1000;
  const TrainedBpe small = train_bpe({"aaab aab ab"}, opt);
  const Tokenizer ts = Tokenizer::load(write_tokenizer(small));
  EXPECT_EQ(ts.encode("aaab aab ab", false), (std::vector<int32_t>{260, 261, 259}));
  EXPECT_EQ(ts.encode("aaa", false), (std::vector<int32_t>{256, 97}));
}

TEST(BpeTrainerErrors, BadOptionsAndEmptyText) {
  BpeTrainOptions opt;
  opt.vocab_size = 256;
  EXPECT_ERROR_CONTAINS(train_bpe({"abc"}, opt), "vocab size 256 is below 256 bytes + 1 special tokens = 257");
  opt.vocab_size = 300;
  EXPECT_ERROR_CONTAINS(train_bpe({}, opt), "no text");
  EXPECT_ERROR_CONTAINS(train_bpe({""}, opt), "no text");
  opt.special_tokens = {"<a>", "<a>"};
  EXPECT_ERROR_CONTAINS(train_bpe({"abc"}, opt), "special token '<a>' is given twice");
  opt.special_tokens = {""};
  EXPECT_ERROR_CONTAINS(train_bpe({"abc"}, opt), "special token: empty");
}

TEST(BpeTrainer, LearnedTokensNeverSpellASpecialToken) {
  BpeTrainOptions opt;
  opt.vocab_size = 2000;
  opt.special_tokens = {"<s>"};
  std::string text;
  for (int i = 0; i < 50; ++i) text += "<s>";
  const TrainedBpe m = train_bpe({text}, opt);
  for (int32_t id = 256; id + 1 < m.vocab_size(); ++id) EXPECT_NE(m.tokens[size_t(id)], "<s>");
}

TEST(TokenizerCli, TrainWritesATokenizerAndRefusesBadInput) {
  const std::string dir = test::scratch_dir();
  std::filesystem::remove_all(dir + "/out");  // from an earlier run
  std::filesystem::remove(dir + "/x.json");
  std::ofstream(dir + "/corpus.txt") << "one fish\n%\ntwo fish\n%\nred fish\n%\nblue fish\n";
  const std::string mtb = test::binary_dir() + "/mtb";
  const std::string log = dir + "/log.txt";
  auto run = [&](const std::string& args) {
    return std::system((mtb + " tokenizer train " + args + " > " + log + " 2>&1").c_str());
  };
  auto read_log = [&] {
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  ASSERT_EQ(run("--corpus " + dir + "/corpus.txt --vocab-size 262 --val-fraction 0 -o " + dir + "/out/"), 0) << read_log();
  const Tokenizer t = Tokenizer::load(dir + "/out/tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 262);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 261);
  // " fish" (4 times) is " f" = 256, "is" = 257, " fis" = 258, " fish" = 259.
  EXPECT_EQ(t.token_to_id("\xC4\xA0" "fish"), 259);
  EXPECT_EQ(run("--corpus " + dir + "/corpus.txt --vocab-size 100 -o " + dir + "/x.json"), 1 << 8);
  EXPECT_NE(read_log().find("mtb: error: vocab size 100 is below 256 bytes + 1 special tokens"), std::string::npos)
      << read_log();
  EXPECT_EQ(run("--corpus " + dir + "/missing --vocab-size 300 -o " + dir + "/x.json"), 1 << 8);
  EXPECT_NE(read_log().find("no such file or directory"), std::string::npos) << read_log();
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.json"));
}

}  // namespace
}  // namespace mtb::tok
