#define PCRE2_CODE_UNIT_WIDTH 8
#include "mtb/tokenizer/regex.h"

#include <pcre2.h>

#include "mtb/core/error.h"

namespace mtb::tok {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

// Oniguruma's `\s` in Unicode mode: White_Space (U+0085 included, U+180E not). PCRE2's own
// differs (no U+0085 in \s; U+180E in \h), so `\s` and `\S` are spelled out.
constexpr const char* kOnigSpace =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Rewrites an Oniguruma pattern for PCRE2.
std::string onig_to_pcre2(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') out += in_class ? std::string(kOnigSpace) : "[" + std::string(kOnigSpace) + "]";
      else if (n == 'S' && !in_class) out += "[^" + std::string(kOnigSpace) + "]";
      else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t close = p.find(":]", i + 2);
      if (close != std::string::npos) {
        out.append(p, i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder h;
  return h.md;
}

}  // namespace

static std::unique_ptr<Regex::Code> build(const std::string& pattern, uint32_t options, const std::string& where) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  auto c = std::make_unique<Regex::Code>();
  c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          options | PCRE2_UTF | ((options & PCRE2_LITERAL) ? 0 : PCRE2_UCP), &err, &err_off, nullptr);
  if (!c->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(where + ": regex '" + pattern + "' does not compile at offset " + std::to_string(err_off) + ": " +
                reinterpret_cast<const char*>(msg));
  }
  c->jit = pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE) == 0;
  return c;
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

Regex Regex::pattern(const std::string& pattern, const std::string& where) {
  Regex r;
  r.code_ = build(onig_to_pcre2(pattern), 0, where);
  return r;
}

Regex Regex::literal(const std::string& text, const std::string& where) {
  Regex r;
  r.code_ = build(text, PCRE2_LITERAL, where);
  return r;
}

void Regex::find_all(std::string_view s, std::vector<Span>& out) const {
  out.clear();
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const size_t n = s.size();
  size_t from = 0;
  size_t last_match_end = SIZE_MAX;
  while (from <= n) {
    const int rc = code_->jit ? pcre2_jit_match(code_->code, subject, n, from, 0, md, nullptr)
                              : pcre2_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) {
      if (rc == PCRE2_ERROR_NOMATCH) break;
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(std::string("tokenizer regex match failed: ") + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b == e && last_match_end == e) {
      // No empty match right after the previous one: step one character and search again.
      if (from >= n) break;
      const auto lead = static_cast<uint8_t>(s[from]);
      from += lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      continue;
    }
    out.emplace_back(uint32_t(b), uint32_t(e));
    from = e;
    last_match_end = e;
  }
}

}  // namespace mtb::tok
