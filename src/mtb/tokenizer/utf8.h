// UTF-8 helpers for the tokenizer: validation (naming the byte offset of the first bad byte),
// Rust-compatible lossy conversion (each maximal invalid subpart becomes one U+FFFD), and
// code point decoding/encoding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mtb::tok {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if none starts there (the
// byte is not a lead byte, or the sequence is cut short or malformed).
size_t utf8_valid_len(std::string_view s, size_t i);

// Offset of the first byte that does not start a valid UTF-8 sequence, or npos.
size_t utf8_invalid_offset(std::string_view s);

// Throws mtb::Error "`what`: invalid UTF-8 at byte offset N" if `s` is not valid UTF-8.
void check_utf8(std::string_view s, const std::string& what);

// Like Rust's String::from_utf8_lossy: valid sequences copied, each maximal invalid
// subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Decodes the code point at s[i] (s must be valid UTF-8 there); sets `len` to its byte length.
inline uint32_t utf8_decode(std::string_view s, size_t i, size_t& len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    len = 2;
    return (uint32_t(b0 & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F);
  }
  if (b0 < 0xF0) {
    len = 3;
    return (uint32_t(b0 & 0x0F) << 12) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 6) | (uint8_t(s[i + 2]) & 0x3F);
  }
  len = 4;
  return (uint32_t(b0 & 0x07) << 18) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 12) |
         (uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6) | (uint8_t(s[i + 3]) & 0x3F);
}

// Byte length of the character whose lead byte is `b` (1 for continuation bytes).
inline size_t utf8_char_len(uint8_t b) { return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

void utf8_append(std::string& out, uint32_t cp);

}  // namespace mtb::tok
