// GPT-2's byte-level alphabet: every byte is shown as a printable code point (printable
// Latin-1 bytes as themselves, the others as U+0100 + n in byte order).
#pragma once
#include <array>
#include <cstdint>

namespace mtb::tok {

struct ByteLevelAlphabet {
  std::array<uint32_t, 256> to_char{};  // byte -> code point
  // code point (< 0x200) -> byte, or -1
  std::array<int16_t, 0x200> to_byte{};
  ByteLevelAlphabet() {
    to_byte.fill(-1);
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? uint32_t(b) : 256 + n++;
      to_byte[to_char[b]] = int16_t(b);
    }
  }
  int byte_of(uint32_t cp) const { return cp < 0x200 ? to_byte[cp] : -1; }
};

inline const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

}  // namespace mtb::tok
