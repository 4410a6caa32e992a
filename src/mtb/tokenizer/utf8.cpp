#include "mtb/tokenizer/utf8.h"

#include <cstdio>
#include <cstring>

#include "mtb/core/error.h"

namespace mtb::tok {

namespace {

// The valid range of the second byte for lead byte b0 (Unicode Table 3-7); {1, 0} if b0 is
// not a lead byte.
inline void second_range(uint8_t b0, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (b0 == 0xE0) lo = 0xA0;
  else if (b0 == 0xED) hi = 0x9F;
  else if (b0 == 0xF0) lo = 0x90;
  else if (b0 == 0xF4) hi = 0x8F;
  else if (b0 < 0xC2 || b0 > 0xF4) {
    lo = 1;
    hi = 0;
  }
}

// Number of bytes of the maximal subpart starting at s[i] (>= 1), and whether it is a
// complete valid sequence.
inline size_t maximal_subpart(std::string_view s, size_t i, bool& valid) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    valid = true;
    return 1;
  }
  uint8_t lo, hi;
  second_range(b0, lo, hi);
  valid = false;
  if (lo > hi) return 1;
  const size_t need = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  size_t n = 1;
  while (n < need) {
    if (i + n >= s.size()) return n;
    const auto b = static_cast<uint8_t>(s[i + n]);
    if (n == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return n;
    ++n;
  }
  valid = true;
  return n;
}

}  // namespace

size_t utf8_valid_len(std::string_view s, size_t i) {
  bool valid = false;
  const size_t n = maximal_subpart(s, i, valid);
  return valid ? n : 0;
}

size_t utf8_invalid_offset(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // Fast path: 8 ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool valid = false;
    const size_t len = maximal_subpart(s, i, valid);
    if (!valid) return i;
    i += len;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view s, const std::string& what) {
  const size_t bad = utf8_invalid_offset(s);
  if (bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(s[bad])));
    throw Error(what + ": invalid UTF-8 at byte offset " + std::to_string(bad) + " (byte " + hex + ")");
  }
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    bool valid = false;
    const size_t len = maximal_subpart(s, i, valid);
    if (valid) out.append(s.data() + i, len);
    else out += "\xEF\xBF\xBD";
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace mtb::tok
