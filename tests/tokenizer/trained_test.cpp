// A tokenizer trained by mtb (src/mtb/tokenizer/trainer) against Hugging Face's Rust
// `tokenizers` library: the Rust library loads the tokenizer.json mtb writes and encodes the
// corpus's validation documents plus edge cases (tools/npm/check_trained.js); mtb's Tokenizer
// must give the same ids and the same decoded text. Skipped where node or the npm package is
// missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mtb/core/mapped_file.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tokenizer/trainer.h"
#include "mtb/train/corpus.h"

namespace mtb {
namespace {
namespace fs = std::filesystem;

TEST(TrainedTokenizer, SameIdsAsTheRustLibrary) {
  const std::string npm = std::string(MTB_SOURCE_DIR) + "/tools/npm";
  if (!fs::exists(npm + "/node_modules/tokenizers")) GTEST_SKIP() << "no " << npm << "/node_modules/tokenizers";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no node";
  const std::string dir = std::string(MTB_BINARY_DIR) + "/test-scratch/TrainedTokenizer";
  fs::create_directories(dir);

  // The fortunes corpus where installed, else a small text of our own.
  std::vector<std::string> train, check;
  if (fs::exists(train::default_corpus_path())) {
    const train::Corpus c = train::load_corpus(train::default_corpus_path());
    train = c.train;
    check = c.val;
  } else {
    for (int i = 0; i < 400; ++i)
      train.push_back("Line " + std::to_string(i * 37) + ": the quick brown fox's tail, isn't it?\n\tIndented -- " +
                      std::to_string(i));
    check = {train.begin(), train.begin() + 50};
  }
  for (const char* s : {"", " ", "\n\n\n", "  leading and trailing  ", "don't WON'T I'M we'LL", "1234567 3.14159",
                        "caf\xC3\xA9 na\xC3\xAFve \xE2\x82\xAC\xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
                        "a<|endoftext|>b", "tabs\t\tand\r\nCRLF", "!!!???...\n", "\xC2\xA0nbsp \xE2\x80\x83" "em"})
    check.push_back(s);

  tok::BpeTrainOptions opt;
  opt.vocab_size = 1000;
  const tok::TrainedBpe model = tok::train_bpe(train, opt);
  ASSERT_TRUE(model.complete);
  const std::string tok_path = dir + "/tokenizer.json";
  const std::string json = tok::bpe_tokenizer_json(model);
  write_file_atomic(tok_path, json.data(), json.size());

  std::string texts;
  for (const std::string& s : check) texts += nlohmann::json(s).dump() + "\n";
  write_file_atomic(dir + "/texts.jsonl", texts.data(), texts.size());
  const std::string cmd = "node " + npm + "/check_trained.js --tokenizer " + tok_path + " --texts " + dir +
                          "/texts.jsonl --out " + dir + "/ids.jsonl";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  const Tokenizer t = Tokenizer::load(tok_path);
  std::ifstream in(dir + "/ids.jsonl");
  std::string line;
  size_t i = 0, tokens = 0;
  for (; std::getline(in, line) && i < check.size(); ++i) {
    const nlohmann::json ref = nlohmann::json::parse(line);
    const std::vector<int32_t> ids = t.encode(check[i], false, true);
    ASSERT_EQ(ids, ref["ids"].get<std::vector<int32_t>>()) << "text " << i << ": " << nlohmann::json(check[i]).dump();
    EXPECT_EQ(t.decode(ids), ref["decoded"].get<std::string>()) << "text " << i;
    EXPECT_EQ(t.decode(ids), check[i]) << "text " << i;
    tokens += ids.size();
  }
  EXPECT_EQ(i, check.size());
  EXPECT_GT(tokens, check.size());
}

}  // namespace
}  // namespace mtb
