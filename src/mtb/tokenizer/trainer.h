// Learning a byte-level BPE tokenizer from text, written as a Hugging Face tokenizer.json
// that mtb's Tokenizer and Hugging Face's Rust library both read.
//
// The tokenizer: no normalizer; pre-tokenizer = Split on Llama 3's regex (`kSplitPattern`:
// contractions, letters with one leading non-letter, numbers in runs of 1-3 digits,
// punctuation runs with trailing newlines, newline runs, other whitespace) followed by
// GPT-2's ByteLevel mapping (no regex of its own, no prefix space); model BPE; ByteLevel
// decoder; no post-processor (nothing is added around a sequence).
//
// Ids: 0..255 are the 256 bytes in byte order (token strings in GPT-2's byte alphabet), then
// one id per learned token in the order learned, then the special tokens in the order given.
// With the vocabulary complete, the last special token has id vocab_size - 1.
//
// Training: the text is cut into documents by the caller; each document is split by the
// regex into pre-tokens, which are counted. Every pre-token is a word of byte symbols; each
// step merges the adjacent pair with the highest count over all words (count x word
// frequency), ties broken by the smaller (left id, right id), into a new symbol. Pair counts
// are updated incrementally (only words holding the merged pair are touched) and the best
// pair comes from a lazy max-heap. A merge whose string already exists (the same bytes
// reached by another path, as the Rust trainer allows) is recorded but reuses that token's id.
// Training stops at the vocabulary size or when no pair is left (`complete` says which).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mtb::tok {

extern const char* const kSplitPattern;

struct BpeTrainOptions {
  int32_t vocab_size = 1000;                               // bytes + merges + special tokens
  std::vector<std::string> special_tokens{"<|endoftext|>"};
  int64_t min_frequency = 1;                               // merge no pair rarer than this
  // Called as merges are learned (done, wanted); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

struct TrainedBpe {
  std::vector<std::string> tokens;                       // id -> bytes (bytes, learned, special)
  std::vector<std::pair<int32_t, int32_t>> merges;       // in rank order: ids of the two parts
  std::vector<std::string> special_tokens;               // ids tokens.size() - n .. tokens.size() - 1
  int64_t words = 0;                                     // distinct pre-tokens
  int64_t pre_tokens = 0;                                // pre-tokens in the text
  bool complete = false;                                 // reached vocab_size
  int32_t vocab_size() const { return static_cast<int32_t>(tokens.size()); }
};

// Learns the merges on `documents` (valid UTF-8; special tokens inside them are plain text).
// Throws mtb::Error for a vocab_size below 256 + the special tokens, an empty or duplicate
// special token, or no text.
TrainedBpe train_bpe(const std::vector<std::string>& documents, const BpeTrainOptions& options);

// The tokenizer.json text of `model` (see above).
std::string bpe_tokenizer_json(const TrainedBpe& model);

}  // namespace mtb::tok
