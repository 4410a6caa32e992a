// The training corpus: document splitting (fortune files at "%" lines, other files at blank
// lines), directory reading rules, the deterministic train/validation split, the token
// stream, the unigram entropy, and bad input (each a one-line mtb::Error naming the path).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mtb/core/parallel.h"
#include "mtb/tokenizer/byte_level.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tokenizer/utf8.h"
#include "mtb/train/corpus.h"
#include "test_util.h"

namespace mtb::train {
namespace {
namespace fs = std::filesystem;

std::string write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A byte-level tokenizer without merges: id b for byte b, "<|endoftext|>" = 256.
std::string bytes_tokenizer(const std::string& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    tok::utf8_append(s, tok::byte_level_alphabet().to_char[size_t(b)]);
    vocab[s] = b;
  }
  nlohmann::json added = nlohmann::json::array();
  added.push_back({{"id", 256}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false},
                   {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
  };
  return write(dir + "/tokenizer.json", j.dump());
}

TEST(Corpus, FortuneFilesSplitAtPercentLines) {
  const auto docs = split_documents("A day for firm decisions!\n%\n\nTwo\n  lines  \n\n%\n%\nLast\n\t\t-- Someone\n%\n");
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], "A day for firm decisions!");
  EXPECT_EQ(docs[1], "Two\n  lines");  // blank edges and trailing spaces dropped
  EXPECT_EQ(docs[2], "Last\n\t\t-- Someone");
}

TEST(Corpus, OtherFilesSplitIntoParagraphs) {
  const auto docs = split_documents("\nFirst paragraph,\nsecond line.\n \t\nSecond.\r\n\r\n\r\n  Third, indented.");
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], "First paragraph,\nsecond line.");
  EXPECT_EQ(docs[1], "Second.");
  EXPECT_EQ(docs[2], "  Third, indented.");
  // A "%" line anywhere makes the whole file a fortune file: blank lines no longer cut.
  const auto fortune = split_documents("one\n\ntwo\n%\nthree");
  ASSERT_EQ(fortune.size(), 2u);
  EXPECT_EQ(fortune[0], "one\n\ntwo");
}

TEST(Corpus, DirectoryReadsTextFilesInNameOrder) {
  const std::string dir = test::scratch_dir() + "/corpus";
  fs::remove_all(dir);  // a rerun finds the link of the last run
  write(dir + "/b", "b1\n%\nb2\n");
  write(dir + "/a", "a1\n\na2\n");
  write(dir + "/a.dat", std::string("\xff\x00\x01", 3));  // fortune's binary index: skipped
  write(dir + "/.hidden", "hidden\n");
  fs::create_symlink("b", dir + "/b.u8");  // a link: skipped
  fs::create_directories(dir + "/sub");
  write(dir + "/sub/c", "c\n");  // not recursive
  const Corpus c = load_corpus(dir, 0.0);
  EXPECT_EQ(c.train, (std::vector<std::string>{"a1", "a2", "b1", "b2"}));
  EXPECT_TRUE(c.val.empty());
  EXPECT_EQ(c.files, 2);
  EXPECT_EQ(c.bytes, 8);
  EXPECT_EQ(c.source, dir);
  // One file on its own.
  EXPECT_EQ(load_corpus(dir + "/a", 0.0).train, (std::vector<std::string>{"a1", "a2"}));
}

TEST(Corpus, SplitIsDeterministicAndDisjoint) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "doc " + std::to_string(i) + "\n%\n";
  const std::string file = write(test::scratch_dir() + "/docs", text);
  const Corpus a = load_corpus(file, 0.05);
  const Corpus b = load_corpus(file, 0.05);
  EXPECT_EQ(a.val.size(), 50u);  // round(1000 * 0.05)
  EXPECT_EQ(a.train.size(), 950u);
  EXPECT_EQ(a.val, b.val);
  EXPECT_EQ(a.train, b.train);
  std::set<std::string> all(a.train.begin(), a.train.end());
  for (const auto& d : a.val) EXPECT_TRUE(all.insert(d).second) << d << " in both";
  EXPECT_EQ(all.size(), 1000u);
  // Both keep the corpus order; the validation documents are spread over the corpus.
  auto index = [](const std::string& d) { return std::stoi(d.substr(4)); };
  for (size_t i = 1; i < a.val.size(); ++i) EXPECT_LT(index(a.val[i - 1]), index(a.val[i]));
  for (size_t i = 1; i < a.train.size(); ++i) EXPECT_LT(index(a.train[i - 1]), index(a.train[i]));
  EXPECT_LT(index(a.val.front()), 200);
  EXPECT_GT(index(a.val.back()), 800);
  // Splitmix64 ranks document 0 by 0xE220A8397B1DCDAF, i.e. in the last quarter of the
  // ranking: with 1/4 of 4 documents for validation it stays in training.
  const std::string four = write(test::scratch_dir() + "/four", "d0\n%\nd1\n%\nd2\n%\nd3\n");
  const Corpus f = load_corpus(four, 0.25);
  EXPECT_EQ(f.val.size(), 1u);
  EXPECT_EQ(f.train.size(), 3u);
  EXPECT_EQ(f.train.front(), "d0");
  // Tiny corpora still get one validation document, and keep one for training.
  const std::string two = write(test::scratch_dir() + "/two", "x\n\ny\n");
  EXPECT_EQ(load_corpus(two, 0.01).val.size(), 1u);
  EXPECT_EQ(load_corpus(two, 0.9).train.size(), 1u);
}

TEST(Corpus, TokenStreamJoinsDocumentsWithTheSeparator) {
  const Tokenizer tok = Tokenizer::load(bytes_tokenizer(test::scratch_dir()));
  // "<|endoftext|>" inside a document is text, not the separator.
  const std::vector<std::string> docs = {"ab", "", "c<|endoftext|>", "\xC3\xA9"};
  std::vector<int32_t> expected = {'a', 'b', 256, 256, 'c'};
  for (char ch : std::string("<|endoftext|>")) expected.push_back(ch);
  for (int32_t x : {256, 0xC3, 0xA9, 256}) expected.push_back(x);
  EXPECT_EQ(tokenize_documents(tok, docs, 256), expected);
  EXPECT_EQ(tokenize_documents(tok, {"ab", "c"}, -1), (std::vector<int32_t>{'a', 'b', 'c'}));
  // Many documents: the same stream with one thread and with several.
  std::vector<std::string> many;
  std::vector<int32_t> serial;
  for (int i = 0; i < 301; ++i) {
    many.push_back(std::to_string(i * 7919));
    for (char ch : many.back()) serial.push_back(ch);
    serial.push_back(256);
  }
  const int threads = num_threads();
  set_num_threads(1);
  EXPECT_EQ(tokenize_documents(tok, many, 256), serial);
  set_num_threads(std::max(threads, 2));
  EXPECT_EQ(tokenize_documents(tok, many, 256), serial);
  set_num_threads(threads);
  EXPECT_TRUE(tokenize_documents(tok, {}, 256).empty());
  // A bad document is an error from the worker thread, not a crash.
  EXPECT_ERROR_CONTAINS(tokenize_documents(tok, {"ok", "\xff"}, 256), "invalid UTF-8");
}

TEST(Corpus, UnigramEntropyInNats) {
  EXPECT_NEAR(unigram_entropy({3, 3, 3, 3}, 5), 0.0, 1e-15);
  EXPECT_NEAR(unigram_entropy({0, 1, 2, 3}, 4), std::log(4.0), 1e-15);
  // p = (1/2, 1/4, 1/4): H = 1.5 ln 2
  EXPECT_NEAR(unigram_entropy({1, 1, 0, 2}, 3), 1.5 * std::log(2.0), 1e-15);
  EXPECT_ERROR_CONTAINS(unigram_entropy({0, 7}, 4), "token id 7");
  EXPECT_ERROR_CONTAINS(unigram_entropy({}, 4), "no tokens");
}

TEST(Corpus, DefaultCorpusIsTheFortunesPackage) {
  EXPECT_EQ(default_corpus_path(), "/usr/share/games/fortunes");
  if (!fs::exists(default_corpus_path())) GTEST_SKIP() << "the fortunes package is not installed";
  const Corpus c = load_corpus(default_corpus_path());
  EXPECT_GT(c.files, 10);
  EXPECT_GT(c.bytes, 1'000'000);
  EXPECT_GT(c.train.size(), 10'000u);
  EXPECT_NEAR(double(c.val.size()) / double(c.train.size() + c.val.size()), 0.05, 1e-4);
}

TEST(CorpusErrors, BadPathsAreOneLineErrors) {
  const std::string dir = test::scratch_dir();
  EXPECT_ERROR_CONTAINS(load_corpus(dir + "/missing"), "corpus " + dir + "/missing: no such file or directory");
  fs::create_directories(dir + "/empty_dir");
  write(dir + "/empty_dir/x.dat", "binary");
  EXPECT_ERROR_CONTAINS(load_corpus(dir + "/empty_dir"), "corpus " + dir + "/empty_dir: the directory holds no text files");
  write(dir + "/blank", "\n  \n%\n\n%\n");
  EXPECT_ERROR_CONTAINS(load_corpus(dir + "/blank"), "corpus " + dir + "/blank: no documents");
  write(dir + "/empty", "");
  EXPECT_ERROR_CONTAINS(load_corpus(dir + "/empty"), "no documents");
  write(dir + "/bad_dir/a", "fine\n");
  write(dir + "/bad_dir/b", "ok\n\xC3(x\n");
  EXPECT_ERROR_CONTAINS(load_corpus(dir + "/bad_dir"), dir + "/bad_dir/b: invalid UTF-8 at byte offset 3");
  EXPECT_ERROR_CONTAINS(load_corpus(dir + "/bad_dir/a", 1.0), "validation fraction");
  EXPECT_ERROR_CONTAINS(load_corpus(dir + "/bad_dir/a", -0.1), "validation fraction");
}

}  // namespace
}  // namespace mtb::train
