// The BPE model of Hugging Face's tokenizers: vocab + ranked merges, applied to one
// pre-token at a time exactly as the Rust library does (lowest rank first, leftmost on
// ties), with byte fallback, unknown-token fusing, `ignore_merges` and a cache of
// pre-token -> ids.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mtb/tokenizer/tables.h"

namespace mtb::tok {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // "" = none
  std::string end_of_word_suffix;         // "" = none
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  BpeModel();
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;

  BpeOptions options;

  // Loading: vocab entries and merges in file order, then finalize().
  // Size hints from the file's size (vocab entries, bytes of token text).
  void reserve(size_t vocab_size, size_t text_bytes);
  void add_token(std::string_view token, int32_t id);
  void add_merge(std::string_view left, std::string_view right);
  // A merge written as one string "left right"; false if it is not exactly two parts.
  bool add_merge_line(std::string_view line);
  // Resolves merges against the vocab (throws mtb::Error naming `where` for a merge whose
  // parts are not in the vocab, as the Rust library refuses them). With `byte_level_input`,
  // tokenize() receives raw bytes that the byte-level alphabet maps to vocab characters.
  void finalize(bool byte_level_input, const std::string& where);

  // Appends the ids of one pre-token.
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }
  // The token of `id`, or nullptr-view (data() == nullptr) if the model has no such id.
  std::string_view id_to_token(int32_t id) const;
  int32_t id_end() const { return int32_t(id_text_.size()); }  // one past the largest id
  size_t vocab_size() const { return vocab_.size(); }
  size_t merge_count() const { return merges_.size(); }
  // The id of `token` spelled in raw bytes (byte-level input), -1 if none.
  int32_t raw_to_id(std::string_view raw) const;

 private:
  void tokenize_chunk(std::string_view piece, std::vector<int32_t>& out) const;
  void tokenize_uncached(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view s, std::vector<int32_t>& syms) const;
  void char_symbols(std::string_view s, std::vector<int32_t>& syms) const;
  void merge(std::vector<int32_t>& syms) const;
  void merge_heap(std::vector<int32_t>& syms) const;

  StringTable vocab_;
  std::vector<uint64_t> id_text_;  // id -> where its text lies in vocab_, kNoText if absent
  PairTable merges_;
  // Merges read before the whole vocab was: kept as strings until finalize().
  std::string merge_arena_;
  std::vector<uint32_t> merge_refs_;  // 4 per merge: left off, left len, right off, right len

  bool byte_level_input_ = false;
  std::array<int32_t, 256> byte_ids_{};  // byte-level input: byte -> id of its character
  bool byte_ids_complete_ = false;
  int32_t unk_id_ = -1;
  bool chunk_at_space_ = false;
  std::vector<uint32_t> space_joiners_;  // characters some token has right before a "▁"
  std::array<int32_t, 256> fallback_ids_{};  // byte -> id of "<0xXX>", -1 if absent

  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace mtb::tok
