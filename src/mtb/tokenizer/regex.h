// A compiled regular expression for the tokenizer's split patterns: PCRE2 with UTF and
// Unicode properties (\p{L}, \p{N}), JIT-compiled. Patterns come from tokenizer.json, where
// Hugging Face runs them with Oniguruma; `\s` is widened to Oniguruma's Unicode set (which,
// unlike PCRE2's, includes U+0085).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mtb::tok {

using Span = std::pair<uint32_t, uint32_t>;  // [begin, end) byte offsets

class Regex {
 public:
  // Compiles an Oniguruma-style pattern; throws mtb::Error naming `where` if it does not compile.
  static Regex pattern(const std::string& pattern, const std::string& where);
  // Matches `text` literally.
  static Regex literal(const std::string& text, const std::string& where);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Every match in `s` (valid UTF-8), left to right, non-overlapping, as Oniguruma's
  // find_iter yields them (an empty match right after the previous match is skipped).
  void find_all(std::string_view s, std::vector<Span>& out) const;

  struct Code;  // the PCRE2 code (opaque)

 private:
  Regex() = default;
  std::unique_ptr<Code> code_;
};

}  // namespace mtb::tok
