// Tokenizers from Hugging Face tokenizer.json files, giving the same ids as Hugging Face's
// Rust `tokenizers` library: byte-level BPE (GPT-2, Llama 3, Qwen2/3) and SentencePiece-style
// BPE with byte fallback (Llama 2, Mistral, Gemma), their normalizers, pre-tokenizers,
// added/special tokens, post-processor template and decoders.
//
// Special tokens in the text: with parse_special (the Rust library's default), a special
// token's string in the input becomes that token's id; without it (the Rust library's
// encode_special_tokens = true) special tokens' strings are encoded as ordinary text. Added
// tokens that are not special (e.g. Qwen3's <think>) are matched either way, as in the Rust
// library. add_special_tokens adds the post-processor's BOS/EOS template.
//
// Not carried over: truncation and padding settings (ignored), pairs of sequences, offsets,
// BPE dropout (refused), WordPiece/Unigram/WordLevel models (refused).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mtb {

class Tokenizer {
 public:
  // `path`: a tokenizer.json file, or a directory holding one (e.g. a Hugging Face model
  // directory). Throws mtb::Error (one line, naming the file and what is wrong).
  static Tokenizer load(const std::string& path);
  // The same from a tokenizer.json document in memory (e.g. one built from a GGUF file's
  // metadata); `where` names it in errors and becomes path().
  static Tokenizer from_json(std::string_view json_text, const std::string& where);
  // The file `load(path)` would read, or throws mtb::Error if there is none.
  static std::string resolve_path(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // `text` must be valid UTF-8 (else mtb::Error naming the byte offset). Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true, bool parse_special = true) const;
  // Unknown ids are skipped (as by the Rust library); invalid byte sequences become U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  const std::string& path() const;
  int32_t vocab_size() const;  // one past the largest id (model and added tokens)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;  // an added token marked special
  // The ids the post-processor adds around a sequence when add_special_tokens is on.
  const std::vector<int32_t>& prefix_ids() const;
  const std::vector<int32_t>& suffix_ids() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for generated tokens: step() returns the text that the new id
// completes, never a broken UTF-8 sequence (bytes of an unfinished character are held back
// until the character is complete). Concatenating every step() and finish() gives
// decode(all ids) in practice (decoders that strip a leading space are given the previous
// tokens as context, as Hugging Face's DecodeStream does).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string step(int32_t id);
  // Whatever is still held back (an unfinished character becomes U+FFFD); then resets.
  std::string finish();
  void reset();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  std::string prefix_;
  size_t prefix_index_ = 0;
};

}  // namespace mtb
