// The training text: documents read from a file or a directory, split deterministically
// into train and validation, and turned into one token stream.
//
// Documents. A file in which some line is exactly "%" (the fortune format) is split at those
// lines; any other file is split into paragraphs at blank lines (lines holding only spaces or
// tabs count as blank). Each document keeps its inner newlines, loses leading and trailing
// blank lines and trailing whitespace, and is dropped if nothing is left. "\r\n" line ends
// are read as "\n".
//
// Files. `path` is one text file, or a directory whose text files are read in name order:
// regular files only (symbolic links, subdirectories, hidden files and `*.dat` files are
// skipped, so the fortune package's `*.u8` links and binary `*.dat` indexes are not read).
// Every file must be valid UTF-8 (an error names the file and byte offset).
//
// Split. Document i is ranked by a fixed 64-bit hash of i (splitmix64); the first
// round(n * val_fraction) of that ranking (at least one when val_fraction > 0 and n >= 2) go
// to validation, the rest to training; both keep the corpus order. No randomness: the same
// corpus always gives the same split.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mtb {
class Tokenizer;
}

namespace mtb::train {

struct Corpus {
  std::vector<std::string> train, val;  // documents
  std::string source;                   // the path it was read from
  int64_t files = 0;                    // files read
  int64_t bytes = 0;                    // bytes of text in all documents
};

// Debian's `fortunes` package (BSD-licensed; see docs/training.md).
std::string default_corpus_path();  // "/usr/share/games/fortunes"

// Reads the documents of `path` and splits them. Throws mtb::Error (one line naming the
// path) for a missing path, a directory without text files, invalid UTF-8, no documents, or
// a val_fraction outside [0, 1).
Corpus load_corpus(const std::string& path, double val_fraction = 0.05);

// The documents of one text (the rule above); exposed for tests and other readers.
std::vector<std::string> split_documents(const std::string& text);

// One token stream: each document encoded as plain text (no special tokens added or parsed)
// and followed by `separator_id` (e.g. "<|endoftext|>"); a negative separator_id adds none.
// Encodes in parallel (mtb's thread pool); the result does not depend on the thread count.
std::vector<int32_t> tokenize_documents(const Tokenizer& tokenizer, const std::vector<std::string>& docs,
                                        int32_t separator_id);

// Entropy in nats of the token frequencies of `tokens` (-sum p ln p): the loss of the best
// model that ignores context. Throws mtb::Error for an id outside [0, vocab) or no tokens.
double unigram_entropy(const std::vector<int32_t>& tokens, int vocab);

}  // namespace mtb::train
