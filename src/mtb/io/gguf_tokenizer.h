// The tokenizer a GGUF file embeds (llama.cpp's tokenizer.ggml.* keys), and its two-way
// mapping to Hugging Face's tokenizer.json:
//
//   "gpt2"  byte-level BPE: tokens (byte-level spelling), merges "a b", token_type and
//           tokenizer.ggml.pre naming the split regex: "qwen2" (Qwen2/3; with Hugging Face's
//           NFC normalizer), "llama-bpe" (Llama 3; whole words in the vocab skip the merges),
//           "gpt-2", "default" (llama.cpp's fallback set of regexes).
//   "llama" SentencePiece BPE: tokens ("▁" for spaces, "<0xNN>" byte tokens), scores,
//           token_type. SentencePiece merges the adjacent pair whose concatenation is the
//           token with the highest score (leftmost on ties), which Hugging Face expresses as
//           merges ranked by that score: mtb derives them (every split of a normal token into
//           two tokens, by score, then by the parts' ids). When a tokenizer.json's merges are
//           not in that order, mtb also writes them as tokenizer.ggml.merges (llama.cpp
//           ignores the key for "llama") and reads them back.
//   "none"  token ids only.
//
// Reading builds a tokenizer.json document and hands it to Tokenizer::from_json; control
// tokens (type 3) become special added tokens, user-defined ones (4) non-special added
// tokens, unused ones (5, llama.cpp's "[PADn]" fillers) are left out.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mtb/io/gguf.h"
#include "mtb/tokenizer/tokenizer.h"

namespace mtb {

// llama.cpp's token types.
enum GgufTokenType : int32_t { kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5, kTokByte = 6 };

struct GgufTokenizer {
  std::string model = "none";  // "gpt2", "llama" or "none"
  std::string pre;             // gpt2 only
  std::vector<std::string> tokens;
  std::vector<float> scores;         // llama only (empty for gpt2)
  std::vector<int32_t> token_type;   // one per token
  std::vector<std::string> merges;   // "left right"; gpt2 always, llama when not derivable
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::string chat_template;  // tokenizer.chat_template ("" = none)
};

// Reads and checks the tokenizer keys of `g` (model "none" when it has none): array lengths
// agree, ids are in range, merges name tokens, the pre-tokenizer is known. Errors name the
// file and the key.
GgufTokenizer read_gguf_tokenizer(const GgufFile& g);

// The tokenizer.json document equivalent to `t` (model "gpt2" or "llama").
std::string gguf_tokenizer_json(const GgufTokenizer& t);
// tokenizer_config.json for a Hugging Face directory written from `t`: chat_template,
// bos/eos tokens, add_bos_token/add_eos_token.
std::string gguf_tokenizer_config_json(const GgufTokenizer& t);

// The tokenizer of a Hugging Face directory (tokenizer.json + tokenizer_config.json) as GGUF
// keys for a model of `vocab` rows. Model "none" when the directory has no tokenizer.json;
// also "none", with `warning` set, when it is a tokenizer GGUF cannot express. Throws
// mtb::Error when the tokenizer has more tokens than the model has rows.
GgufTokenizer gguf_tokenizer_from_hf(const std::string& dir, int64_t vocab, std::string* warning);

// The SentencePiece merges implied by tokens, types and scores ("left right", in rank order).
std::vector<std::string> spm_merges_from_scores(const std::vector<std::string>& tokens,
                                                const std::vector<int32_t>& token_type,
                                                const std::vector<float>& scores);

// The tokenizer embedded in a GGUF file; mtb::Error when it has none.
Tokenizer load_gguf_tokenizer(const std::string& path);

}  // namespace mtb
