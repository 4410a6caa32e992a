// The pipeline pieces a tokenizer.json names: normalizers, pre-tokenizers, decoders and
// post-processors, plus the matcher of added tokens. Each is built from its JSON object;
// an unknown or unsupported "type" is an mtb::Error naming the file and the component.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mtb/tokenizer/regex.h"

namespace mtb::tok {

// A piece of text on its way to the model. `at_start`: it begins at offset 0 of the input
// (Metaspace's prepend_scheme "first" looks at that).
struct Piece {
  std::string_view text;
  bool at_start = false;
};

// Strings made while encoding one input; pieces may point into them.
struct Scratch {
  std::deque<std::string> strings;
  std::vector<Span> spans;
  std::string_view keep(std::string s) { return strings.emplace_back(std::move(s)); }
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
  // True when normalize() would leave `s` as it is (a quick check; false is always safe).
  virtual bool is_identity(std::string_view) const { return false; }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the non-empty pieces that `in` splits into.
  virtual void split(const Piece& in, std::vector<Piece>& out, Scratch& scratch) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Context for building components: the file, for messages.
struct BuildContext {
  std::string where;  // "path/tokenizer.json"
};

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const BuildContext& ctx);
// `byte_level_last`: set when the last step is ByteLevel; with `defer_byte_level` that step
// leaves the bytes unmapped (the BPE model maps them itself).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const BuildContext& ctx,
                                                 bool defer_byte_level);
bool pre_tokenizer_ends_in_byte_level(const nlohmann::json& j);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const BuildContext& ctx);

// What the post-processor puts around a single sequence when special tokens are added.
struct PostProcessor {
  std::vector<int32_t> prefix, suffix;
};
PostProcessor make_post_processor(const nlohmann::json& j, const BuildContext& ctx);

// Added tokens, matched in text before anything else (leftmost, then longest).
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

class AddedTokenMatcher {
 public:
  void build(const std::vector<AddedToken>& tokens, const std::vector<size_t>& which);
  bool empty() const { return nodes_.size() <= 1; }
  // A segment of text: either an added token (index into the token list) or plain text.
  struct Segment {
    int32_t token;  // -1: plain text
    uint32_t begin, end;
  };
  // Splits `text` into segments covering it. With `skip_special`, special tokens are not
  // matched (a match of one is passed over, as the Rust library's encode_special_tokens).
  void split(std::string_view text, const std::vector<AddedToken>& tokens, bool skip_special,
             std::vector<Segment>& out) const;

 private:
  struct Node {
    int32_t token = -1;
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_{1};
  std::array<int32_t, 256> root_{};  // first byte -> node, 0 if none
};

// Unicode helpers shared by the components.
bool is_white_space(uint32_t cp);  // Rust's char::is_whitespace (White_Space property)

}  // namespace mtb::tok
