#include "mtb/tokenizer/components.h"

#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdlib>

#include "mtb/core/error.h"
#include "mtb/tokenizer/byte_level.h"
#include "mtb/tokenizer/utf8.h"

namespace mtb::tok {

using json = nlohmann::json;

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
      (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends just before byte `end` of a valid UTF-8 string.
uint32_t last_char(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (uint8_t(s[b]) & 0xC0) == 0x80) --b;
  size_t len = 0;
  return utf8_decode(s, b, len);
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string get_string(const json& j, const char* key, const std::string& fallback, const BuildContext& ctx,
                       const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw Error(ctx.where + ": " + what + ": '" + key + "' must be a string");
  return it->get<std::string>();
}

// A {"String": s} or {"Regex": r} pattern.
struct Pattern {
  bool is_regex = false;
  std::string text;
};
Pattern get_pattern(const json& j, const BuildContext& ctx, const std::string& what) {
  auto it = j.find("pattern");
  if (it != j.end() && it->is_object()) {
    if (auto s = it->find("String"); s != it->end() && s->is_string()) return {false, s->get<std::string>()};
    if (auto r = it->find("Regex"); r != it->end() && r->is_string()) return {true, r->get<std::string>()};
  }
  throw Error(ctx.where + ": " + what + ": 'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
}

Regex compile(const Pattern& p, const BuildContext& ctx, const std::string& what) {
  return p.is_regex ? Regex::pattern(p.text, ctx.where + ": " + what)
                    : Regex::literal(p.text, ctx.where + ": " + what);
}

// ---------------------------------------------------------------- normalizers

// Whether `cp` is left alone by NFC whatever surrounds it: a starter (combining class 0)
// that no composition takes as its second part and that NFC maps to itself. Conservative:
// "no" only sends the text through utf8proc.
bool nfc_inert(uint32_t cp) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) return true;  // Hangul syllables (a trailing jamo is not inert)
  const utf8proc_property_t* p = utf8proc_get_property(utf8proc_int32_t(cp));
  if (p->combining_class != 0) return false;
  if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;  // second of a pair
  if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return false;
  if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) return true;  // no canonical decomposition
  // Precomposed: inert if NFC gives it back (not for singletons such as U+212B or exclusions).
  std::string one;
  utf8_append(one, cp);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(one.data()),
                                          utf8proc_ssize_t(one.size()), &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const bool same = n == utf8proc_ssize_t(one.size()) && std::memcmp(out, one.data(), one.size()) == 0;
  std::free(out);
  return same;
}

// nfc_inert, remembered for the Basic Multilingual Plane (0 unknown, 1 inert, 2 not).
bool nfc_inert_cached(uint32_t cp) {
  static std::atomic<uint8_t> bmp[0x10000];
  if (cp >= 0x10000) return nfc_inert(cp);
  uint8_t v = bmp[cp].load(std::memory_order_relaxed);
  if (v == 0) {
    v = nfc_inert(cp) ? 1 : 2;
    bmp[cp].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

bool all_ascii(std::string_view s) {
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ull) return false;
  }
  for (; i < s.size(); ++i)
    if (uint8_t(s[i]) >= 0x80) return false;
  return true;
}

std::string utf8proc_apply(std::string_view s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &out, utf8proc_option_t(options));
  if (n < 0) throw Error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return r;
}

struct UnicodeNormalizer : Normalizer {
  int options;
  explicit UnicodeNormalizer(int o) : options(o) {}
  bool nfc() const { return options == (UTF8PROC_STABLE | UTF8PROC_COMPOSE); }
  bool is_identity(std::string_view s) const override {
    if (all_ascii(s)) return true;
    if (!nfc()) return false;
    for (size_t i = 0; i < s.size();) {
      if (uint8_t(s[i]) < 0x80) {
        ++i;
        continue;
      }
      size_t len = 0;
      if (!nfc_inert_cached(utf8_decode(s, i, len))) return false;
      i += len;
    }
    return true;
  }
  void normalize(std::string& s) const override {
    if (all_ascii(s)) return;
    if (!nfc()) {
      s = utf8proc_apply(s, options);
      return;
    }
    // NFC works on each run of non-inert characters with the character before it (which
    // they may combine with); inert characters in between stay as they are.
    std::string out;
    size_t done = 0;        // s[0, done) is in `out`
    size_t prev_start = 0;  // start of the character before i
    bool changed = false;
    for (size_t i = 0; i < s.size();) {
      size_t len = 1;
      const bool inert = uint8_t(s[i]) < 0x80 || nfc_inert_cached(utf8_decode(s, i, len));
      if (inert) {
        prev_start = i;
        i += len;
        continue;
      }
      size_t end = i + len;  // the run of non-inert characters
      while (end < s.size()) {
        size_t l = 1;
        if (uint8_t(s[end]) < 0x80 || nfc_inert_cached(utf8_decode(s, end, l))) break;
        end += l;
      }
      const size_t from = std::max(done, i > 0 ? prev_start : size_t(0));
      out.append(s, done, from - done);
      out += utf8proc_apply(std::string_view(s).substr(from, end - from), options);
      done = end;
      changed = true;
      prev_start = i;
      i = end;
    }
    if (!changed) return;
    out.append(s, done, std::string::npos);
    s.swap(out);
  }
};

struct ReplaceNormalizer : Normalizer {
  Pattern pattern;
  Regex regex;
  std::string content;
  ReplaceNormalizer(Pattern p, Regex r, std::string c) : pattern(std::move(p)), regex(std::move(r)), content(std::move(c)) {}
  bool is_identity(std::string_view s) const override {
    return !pattern.is_regex && (pattern.text.empty() || s.find(pattern.text) == std::string_view::npos);
  }
  void normalize(std::string& s) const override {
    if (!pattern.is_regex) {
      if (pattern.text.empty() || s.find(pattern.text) == std::string::npos) return;
      std::string out;
      out.reserve(s.size() + s.size() / 4);
      size_t pos = 0;
      for (size_t hit; (hit = s.find(pattern.text, pos)) != std::string::npos; pos = hit + pattern.text.size()) {
        out.append(s, pos, hit - pos);
        out += content;
      }
      out.append(s, pos, std::string::npos);
      s.swap(out);
      return;
    }
    std::vector<Span> spans;
    regex.find_all(s, spans);
    if (spans.empty()) return;
    std::string out;
    size_t pos = 0;
    for (const Span& m : spans) {
      out.append(s, pos, m.first - pos);
      out += content;
      pos = m.second;
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
  }
};

struct PrependNormalizer : Normalizer {
  std::string prepend;
  bool is_identity(std::string_view s) const override { return s.empty() || prepend.empty(); }
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend);
  }
};

struct StripNormalizer : Normalizer {
  bool left = true, right = true;
  void normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left) {
      while (b < e) {
        size_t len = 0;
        if (!is_white_space(utf8_decode(s, b, len))) break;
        b += len;
      }
    }
    if (right) {
      while (e > b && is_white_space(last_char(s, e))) {
        --e;
        while (e > b && (uint8_t(s[e]) & 0xC0) == 0x80) --e;
      }
    }
    s = s.substr(b, e - b);
  }
};

struct LowercaseNormalizer : Normalizer {
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      size_t len = 0;
      const uint32_t cp = utf8_decode(s, i, len);
      i += len;
      if (cp < 0x80) out += char(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
      else if (cp == 0x130) out += "i\xCC\x87";  // the one multi-character lowercase mapping
      else utf8_append(out, uint32_t(utf8proc_tolower(utf8proc_int32_t(cp))));
    }
    s.swap(out);
  }
};

struct SequenceNormalizer : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> steps;
  bool is_identity(std::string_view s) const override {
    for (const auto& n : steps)
      if (!n->is_identity(s)) return false;
    return true;
  }
  void normalize(std::string& s) const override {
    for (const auto& n : steps) n->normalize(s);
  }
};

// ---------------------------------------------------------------- pre-tokenizers

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j, const BuildContext& ctx) {
  const std::string b = get_string(j, "behavior", "", ctx, "pre_tokenizer Split");
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  throw Error(ctx.where + ": pre_tokenizer Split: unknown behavior '" + b + "'");
}

// Splits `in` at `matches` as the Rust library's NormalizedString::split does.
void split_by(const Piece& in, const std::vector<Span>& matches, Behavior behavior, bool invert,
              std::vector<Piece>& out) {
  const std::string_view s = in.text;
  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back({s.substr(b, e - b), in.at_start && b == 0});
  };
  if (behavior == Behavior::Isolated) {  // every match and every gap, in order
    size_t prev = 0;
    for (const Span& m : matches) {
      emit(prev, m.first);
      emit(m.first, m.second);
      prev = m.second;
    }
    emit(prev, s.size());
    return;
  }
  struct Part {
    size_t b, e;
    bool match;
  };
  thread_local std::vector<Part> parts, acc;
  parts.clear();
  acc.clear();
  size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.first) parts.push_back({prev, m.first, false});
    parts.push_back({m.first, m.second, true});
    prev = m.second;
  }
  if (prev != s.size()) parts.push_back({prev, s.size(), false});
  if (invert)
    for (Part& p : parts) p.match = !p.match;
  switch (behavior) {
    case Behavior::Removed:
      for (const Part& p : parts)
        if (!p.match) emit(p.b, p.e);
      return;
    case Behavior::Contiguous: {
      bool previous = false;
      for (const Part& p : parts) {
        if (p.match == previous && !acc.empty()) acc.back().e = p.e;
        else acc.push_back({p.b, p.e, false});
        previous = p.match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool previous = false;
      for (const Part& p : parts) {
        if (p.match && !previous && !acc.empty()) acc.back().e = p.e;
        else acc.push_back({p.b, p.e, false});
        previous = p.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previous = false;
      for (size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.match && !previous && !acc.empty()) acc.back().b = p.b;
        else acc.push_back({p.b, p.e, false});
        previous = p.match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    }
    case Behavior::Isolated:
      break;
  }
  for (const Part& p : acc) emit(p.b, p.e);
}

struct SplitPreTokenizer : PreTokenizer {
  Regex regex;
  Behavior behavior;
  bool invert;
  SplitPreTokenizer(Regex r, Behavior b, bool i) : regex(std::move(r)), behavior(b), invert(i) {}
  void split(const Piece& in, std::vector<Piece>& out, Scratch& scratch) const override {
    regex.find_all(in.text, scratch.spans);
    split_by(in, scratch.spans, behavior, invert, out);
  }
};

std::string map_bytes(std::string_view s) {
  const ByteLevelAlphabet& a = byte_level_alphabet();
  std::string out;
  out.reserve(s.size() * 2);
  for (const char c : s) utf8_append(out, a.to_char[uint8_t(c)]);
  return out;
}

struct ByteLevelPreTokenizer : PreTokenizer {
  bool add_prefix_space = true, use_regex = true, defer = false;
  Regex gpt2 = Regex::pattern(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                              "ByteLevel");
  void split(const Piece& in0, std::vector<Piece>& out, Scratch& scratch) const override {
    Piece in = in0;
    if (add_prefix_space && in.text.front() != ' ') {
      std::string t;
      t.reserve(in.text.size() + 1);
      t += ' ';
      t.append(in.text);
      in.text = scratch.keep(std::move(t));
    }
    const size_t first = out.size();
    if (use_regex) {
      gpt2.find_all(in.text, scratch.spans);
      split_by(in, scratch.spans, Behavior::Isolated, false, out);
    } else {
      out.push_back(in);
    }
    if (!defer)
      for (size_t k = first; k < out.size(); ++k) out[k].text = scratch.keep(map_bytes(out[k].text));
  }
};

enum class PrependScheme { Always, First, Never };

PrependScheme parse_scheme(const json& j, const BuildContext& ctx, const std::string& what) {
  auto it = j.find("prepend_scheme");
  if (it != j.end() && it->is_string()) {
    const std::string s = it->get<std::string>();
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    throw Error(ctx.where + ": " + what + ": unknown prepend_scheme '" + s + "'");
  }
  return get_bool(j, "add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
}

std::string get_replacement(const json& j, const BuildContext& ctx, const std::string& what) {
  const std::string r = get_string(j, "replacement", "\xE2\x96\x81", ctx, what);
  size_t len = 0;
  if (r.empty() || utf8_valid_len(r, 0) != r.size() || (utf8_decode(r, 0, len), len != r.size()))
    throw Error(ctx.where + ": " + what + ": 'replacement' must be one character");
  return r;
}

struct MetaspacePreTokenizer : PreTokenizer {
  std::string replacement;
  PrependScheme scheme = PrependScheme::Always;
  bool split_on_replacement = true;
  Regex literal;
  explicit MetaspacePreTokenizer(std::string r)
      : replacement(std::move(r)), literal(Regex::literal(replacement, "Metaspace")) {}
  void split(const Piece& in, std::vector<Piece>& out, Scratch& scratch) const override {
    std::string s;
    s.reserve(in.text.size() + 8);
    for (const char c : in.text) {
      if (c == ' ') s += replacement;
      else s += c;
    }
    const bool needs_prefix = s.compare(0, replacement.size(), replacement) != 0;
    if (needs_prefix && (scheme == PrependScheme::Always || (scheme == PrependScheme::First && in.at_start)))
      s.insert(0, replacement);
    const Piece p{scratch.keep(std::move(s)), in.at_start};
    if (!split_on_replacement) {
      out.push_back(p);
      return;
    }
    literal.find_all(p.text, scratch.spans);
    split_by(p, scratch.spans, Behavior::MergedWithNext, false, out);
  }
};

struct SequencePreTokenizer : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void split(const Piece& in, std::vector<Piece>& out, Scratch& scratch) const override {
    std::vector<Piece> cur{in}, next;
    for (const auto& step : steps) {
      next.clear();
      for (const Piece& p : cur) step->split(p, next, scratch);
      cur.swap(next);
    }
    out.insert(out.end(), cur.begin(), cur.end());
  }
};

// ---------------------------------------------------------------- decoders

struct ByteLevelDecoder : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    const ByteLevelAlphabet& a = byte_level_alphabet();
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0; i < t.size();) {
        size_t len = 0;
        const int b = a.byte_of(utf8_decode(t, i, len));
        if (b < 0) {
          all = false;
          break;
        }
        bytes += char(b);
        i += len;
      }
      if (!all) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

struct ByteFallbackDecoder : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_invalid_offset(pending) == std::string_view::npos) out.push_back(pending);
      else
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = parse_hex_byte(t.substr(3, 2));
      if (byte >= 0) {
        pending += char(byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
  // Rust's u8::from_str_radix(s, 16): an optional '+' then hex digits.
  static int parse_hex_byte(const std::string& s) {
    size_t i = s[0] == '+' ? 1 : 0;
    if (i == s.size()) return -1;
    int v = 0;
    for (; i < s.size(); ++i) {
      const char c = s[i];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
};

struct FuseDecoder : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

struct StripDecoder : Decoder {
  uint32_t content = ' ';
  size_t start = 0, stop = 0;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::pair<uint32_t, size_t>> chars;  // code point, byte offset
      for (size_t i = 0; i < t.size();) {
        size_t len = 0;
        chars.emplace_back(utf8_decode(t, i, len), i);
        i += len;
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start, chars.size()); ++i) {
        if (chars[i].first != content) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < std::min(stop, chars.size()); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index].first != content) break;
        stop_cut = index;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      const size_t b = start_cut < chars.size() ? chars[start_cut].second : t.size();
      const size_t e = stop_cut < chars.size() ? chars[stop_cut].second : t.size();
      t = t.substr(b, e - b);
    }
  }
};

struct ReplaceDecoder : Decoder {
  Regex regex;
  std::string content;
  ReplaceDecoder(Regex r, std::string c) : regex(std::move(r)), content(std::move(c)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<Span> spans;
    for (std::string& t : tokens) {
      regex.find_all(t, spans);
      if (spans.empty()) continue;
      std::string out;
      size_t pos = 0;
      for (const Span& m : spans) {
        out.append(t, pos, m.first - pos);
        out += content;
        pos = m.second;
      }
      out.append(t, pos, std::string::npos);
      t.swap(out);
    }
  }
};

struct MetaspaceDecoder : Decoder {
  std::string replacement;
  PrependScheme scheme = PrependScheme::Always;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (t.find(replacement) == std::string::npos) continue;
      // Every replacement becomes a space, except in the first token, where (unless the
      // scheme is "never") each one is dropped.
      const bool drop = i == 0 && scheme != PrependScheme::Never;
      std::string out;
      size_t pos = 0;
      for (size_t hit; (hit = t.find(replacement, pos)) != std::string::npos; pos = hit + replacement.size()) {
        out.append(t, pos, hit - pos);
        if (!drop) out += ' ';
      }
      out.append(t, pos, std::string::npos);
      t.swap(out);
    }
  }
};

struct SequenceDecoder : Decoder {
  std::vector<std::unique_ptr<Decoder>> steps;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : steps) d->decode_chain(tokens);
  }
};

const json& require_array(const json& j, const char* key, const BuildContext& ctx, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) throw Error(ctx.where + ": " + what + ": '" + key + "' must be a list");
  return *it;
}

}  // namespace

// ---------------------------------------------------------------- factories

std::unique_ptr<Normalizer> make_normalizer(const json& j, const BuildContext& ctx) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j);
  const std::string what = "normalizer " + type;
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Replace") {
    Pattern p = get_pattern(j, ctx, what);
    Regex r = compile(p, ctx, what);
    return std::make_unique<ReplaceNormalizer>(std::move(p), std::move(r), get_string(j, "content", "", ctx, what));
  }
  if (type == "Prepend") {
    auto n = std::make_unique<PrependNormalizer>();
    n->prepend = get_string(j, "prepend", "", ctx, what);
    return n;
  }
  if (type == "Strip") {
    auto n = std::make_unique<StripNormalizer>();
    n->left = get_bool(j, "strip_left", true);
    n->right = get_bool(j, "strip_right", true);
    return n;
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Sequence") {
    auto n = std::make_unique<SequenceNormalizer>();
    for (const json& step : require_array(j, "normalizers", ctx, what))
      if (auto s = make_normalizer(step, ctx)) n->steps.push_back(std::move(s));
    return n;
  }
  throw Error(ctx.where + ": normalizer type '" + (type.empty() ? j.dump() : type) +
              "' is not supported (mtb supports NFC, NFD, NFKC, NFKD, Replace, Prepend, Strip, Lowercase, Sequence)");
}

bool pre_tokenizer_ends_in_byte_level(const json& j) {
  const std::string type = type_of(j);
  if (type == "ByteLevel") return true;
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    return it != j.end() && it->is_array() && !it->empty() && pre_tokenizer_ends_in_byte_level(it->back());
  }
  return false;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const BuildContext& ctx, bool defer_byte_level) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j);
  const std::string what = "pre_tokenizer " + type;
  if (type == "Split") {
    const Pattern p = get_pattern(j, ctx, what);
    return std::make_unique<SplitPreTokenizer>(compile(p, ctx, what), parse_behavior(j, ctx), get_bool(j, "invert", false));
  }
  if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevelPreTokenizer>();
    b->add_prefix_space = get_bool(j, "add_prefix_space", true);
    b->use_regex = get_bool(j, "use_regex", true);
    b->defer = defer_byte_level;
    return b;
  }
  if (type == "Metaspace") {
    auto m = std::make_unique<MetaspacePreTokenizer>(get_replacement(j, ctx, what));
    m->scheme = parse_scheme(j, ctx, what);
    m->split_on_replacement = get_bool(j, "split", true);
    return m;
  }
  if (type == "Digits") {
    const bool individual = get_bool(j, "individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(Regex::pattern("\\p{N}", ctx.where + ": " + what),
                                               individual ? Behavior::Isolated : Behavior::Contiguous, false);
  }
  if (type == "Sequence") {
    auto s = std::make_unique<SequencePreTokenizer>();
    const json& steps = require_array(j, "pretokenizers", ctx, what);
    for (size_t k = 0; k < steps.size(); ++k)
      if (auto p = make_pre_tokenizer(steps[k], ctx, defer_byte_level && k + 1 == steps.size()))
        s->steps.push_back(std::move(p));
    return s;
  }
  throw Error(ctx.where + ": pre_tokenizer type '" + (type.empty() ? j.dump() : type) +
              "' is not supported (mtb supports Split, ByteLevel, Metaspace, Digits, Sequence)");
}

std::unique_ptr<Decoder> make_decoder(const json& j, const BuildContext& ctx) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j);
  const std::string what = "decoder " + type;
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    auto d = std::make_unique<StripDecoder>();
    const std::string c = get_string(j, "content", " ", ctx, what);
    size_t len = 0;
    if (c.empty() || utf8_valid_len(c, 0) != c.size()) throw Error(ctx.where + ": " + what + ": 'content' must be one character");
    d->content = utf8_decode(c, 0, len);
    auto count = [&](const char* key) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number_unsigned()) throw Error(ctx.where + ": " + what + ": '" + key + "' must be a count");
      return it->get<size_t>();
    };
    d->start = count("start");
    d->stop = count("stop");
    return d;
  }
  if (type == "Replace") {
    const Pattern p = get_pattern(j, ctx, what);
    return std::make_unique<ReplaceDecoder>(compile(p, ctx, what), get_string(j, "content", "", ctx, what));
  }
  if (type == "Metaspace") {
    auto d = std::make_unique<MetaspaceDecoder>();
    d->replacement = get_replacement(j, ctx, what);
    d->scheme = parse_scheme(j, ctx, what);
    return d;
  }
  if (type == "Sequence") {
    auto s = std::make_unique<SequenceDecoder>();
    for (const json& step : require_array(j, "decoders", ctx, what))
      if (auto d = make_decoder(step, ctx)) s->steps.push_back(std::move(d));
    return s;
  }
  throw Error(ctx.where + ": decoder type '" + (type.empty() ? j.dump() : type) +
              "' is not supported (mtb supports ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)");
}

PostProcessor make_post_processor(const json& j, const BuildContext& ctx) {
  PostProcessor pp;
  if (j.is_null()) return pp;
  const std::string type = type_of(j);
  const std::string what = "post_processor " + type;
  if (type == "ByteLevel") return pp;
  if (type == "TemplateProcessing") {
    const json& single = require_array(j, "single", ctx, what);
    auto specials = j.find("special_tokens");
    int sequences = 0;
    for (const json& item : single) {
      if (item.contains("Sequence")) {
        ++sequences;
        continue;
      }
      auto st = item.find("SpecialToken");
      if (st == item.end() || !st->is_object() || !st->contains("id"))
        throw Error(ctx.where + ": " + what + ": a 'single' item is neither Sequence nor SpecialToken");
      const std::string name = (*st)["id"].get<std::string>();
      if (specials == j.end() || !specials->contains(name))
        throw Error(ctx.where + ": " + what + ": special token '" + name + "' is missing from special_tokens");
      const json& ids = (*specials)[name]["ids"];
      auto& dst = sequences == 0 ? pp.prefix : pp.suffix;
      for (const json& id : ids) dst.push_back(id.get<int32_t>());
    }
    if (sequences != 1) throw Error(ctx.where + ": " + what + ": 'single' must hold exactly one Sequence");
    return pp;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](const char* key) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_array() || it->size() != 2) throw Error(ctx.where + ": " + what + ": '" + key + "' must be [token, id]");
      return (*it)[1].get<int32_t>();
    };
    pp.prefix = {id_of("cls")};
    pp.suffix = {id_of("sep")};
    return pp;
  }
  if (type == "Sequence") {
    for (const json& step : require_array(j, "processors", ctx, what)) {
      const PostProcessor inner = make_post_processor(step, ctx);
      pp.prefix.insert(pp.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      pp.suffix.insert(pp.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return pp;
  }
  throw Error(ctx.where + ": post_processor type '" + (type.empty() ? j.dump() : type) +
              "' is not supported (mtb supports TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence)");
}

// ---------------------------------------------------------------- added tokens

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& next = nodes_[size_t(node)].next;
  auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t(-1)));
  return it != next.end() && it->first == b ? it->second : 0;
}

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens, const std::vector<size_t>& which) {
  nodes_.assign(1, Node{});
  root_.fill(0);
  for (const size_t t : which) {
    const std::string& s = tokens[t].content;
    if (s.empty()) continue;
    int32_t node = 0;
    for (const char c : s) {
      const uint8_t b = uint8_t(c);
      int32_t nxt = node == 0 ? root_[b] : child(node, b);
      if (nxt == 0) {
        nxt = int32_t(nodes_.size());
        nodes_.emplace_back();
        if (node == 0) {
          root_[b] = nxt;
        } else {
          auto& v = nodes_[size_t(node)].next;
          v.insert(std::lower_bound(v.begin(), v.end(), std::make_pair(b, int32_t(-1))), {b, nxt});
        }
      }
      node = nxt;
    }
    // The first of equal contents wins, as the pattern listed first does in aho-corasick.
    if (nodes_[size_t(node)].token < 0) nodes_[size_t(node)].token = int32_t(t);
  }
}

void AddedTokenMatcher::split(std::string_view text, const std::vector<AddedToken>& tokens, bool skip_special,
                              std::vector<Segment>& out) const {
  out.clear();
  const size_t n = text.size();
  size_t start_offset = 0;
  size_t i = 0;
  while (i < n) {
    int32_t node = root_[uint8_t(text[i])];
    if (node == 0) {
      ++i;
      continue;
    }
    // Longest token starting at i.
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i + 1;; ++j) {
      if (nodes_[size_t(node)].token >= 0) {
        best = nodes_[size_t(node)].token;
        best_end = j;
      }
      if (j >= n) break;
      node = child(node, uint8_t(text[j]));
      if (node == 0) break;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens[size_t(best)];
    size_t start = i, stop = best_end;
    i = best_end;  // the search goes on after the match, whatever becomes of it
    if (skip_special && tok.special) continue;
    if (tok.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char(text, start));
      size_t len = 0;
      const bool stop_space = stop == n || !is_word_char(utf8_decode(text, stop, len));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      size_t b = start;
      while (b > 0 && is_white_space(last_char(text, b))) {
        --b;
        while (b > 0 && (uint8_t(text[b]) & 0xC0) == 0x80) --b;
      }
      start = std::max(b, start_offset);
    }
    if (tok.rstrip) {
      while (stop < n) {
        size_t len = 0;
        if (!is_white_space(utf8_decode(text, stop, len))) break;
        stop += len;
      }
    }
    start = std::max(start, start_offset);
    if (start_offset < start) out.push_back({-1, uint32_t(start_offset), uint32_t(start)});
    out.push_back({best, uint32_t(start), uint32_t(stop)});
    start_offset = stop;
  }
  if (start_offset < n) out.push_back({-1, uint32_t(start_offset), uint32_t(n)});
}

}  // namespace mtb::tok
