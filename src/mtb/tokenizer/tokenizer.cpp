#include "mtb/tokenizer/tokenizer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "mtb/core/error.h"
#include "mtb/tokenizer/bpe.h"
#include "mtb/tokenizer/components.h"
#include "mtb/tokenizer/utf8.h"

namespace mtb {

using json = nlohmann::json;
using namespace tok;

namespace {

// Parses tokenizer.json into a DOM, except model.vocab and model.merges (the bulk of the
// file), which stream straight into the BPE model.
class Loader : public nlohmann::json_sax<json> {
 public:
  Loader(BpeModel& model, std::string where) : model_(model), where_(std::move(where)) {}
  json root;
  std::string error;
  bool vocab_streamed = false, merges_streamed = false;

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::Vocab) return fail("model.vocab: token '" + vkey_ + "' has a negative id");
    return value(v);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::Vocab) {
      if (v > 0x7FFFFFFF) return fail("model.vocab: id of '" + vkey_ + "' is too large");
      model_.add_token(vkey_, int32_t(v));
      return true;
    }
    return value(v);
  }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool string(string_t& v) override {
    if (mode_ == Mode::Merges) {
      if (!model_.add_merge_line(v)) return fail("model.merges: '" + v + "' is not two tokens separated by one space");
      return true;
    }
    if (mode_ == Mode::MergePair) {
      if (pair_n_ == 0) pair_a_ = std::move(v);
      else if (pair_n_ == 1) pair_b_ = std::move(v);
      ++pair_n_;
      return true;
    }
    return value(std::move(v));
  }
  bool binary(binary_t&) override { return fail("unexpected binary value"); }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::Normal) return fail(mode_ == Mode::Vocab ? "model.vocab must map tokens to ids" : "model.merges must be a list of merges");
    if (stack_.size() == 2 && stack_[1] == model_obj_ && last_key_ == "vocab") {
      mode_ = Mode::Vocab;
      vocab_streamed = true;
      return true;
    }
    json* obj = place(json::value_t::object);
    if (stack_.size() == 1 && last_key_ == "model") model_obj_ = obj;
    stack_.push_back(obj);
    return true;
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::Vocab) {
      vkey_ = std::move(k);
      return true;
    }
    if (mode_ != Mode::Normal) return fail("model.merges must be a list of merges");
    last_key_ = k;
    element_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::Vocab) {
      mode_ = Mode::Normal;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_n_ = 0;
      return true;
    }
    if (mode_ != Mode::Normal) return fail(mode_ == Mode::Vocab ? "model.vocab must map tokens to ids" : "model.merges must be a list of merges");
    if (stack_.size() == 2 && stack_[1] == model_obj_ && last_key_ == "merges") {
      mode_ = Mode::Merges;
      merges_streamed = true;
      return true;
    }
    stack_.push_back(place(json::value_t::array));
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::MergePair) {
      if (pair_n_ != 2) return fail("model.merges: a merge is not a pair of tokens");
      model_.add_merge(pair_a_, pair_b_);
      mode_ = Mode::Merges;
      return true;
    }
    if (mode_ == Mode::Merges) {
      mode_ = Mode::Normal;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    if (error.empty()) error = std::string("not valid JSON: ") + ex.what();
    return false;
  }

 private:
  enum class Mode { Normal, Vocab, Merges, MergePair };
  bool fail(const std::string& what) {
    if (error.empty()) error = what;
    return false;
  }
  template <class V>
  json* place(V&& v) {
    if (stack_.empty()) {
      root = json(std::forward<V>(v));
      return &root;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->emplace_back(std::forward<V>(v));
      return &stack_.back()->back();
    }
    *element_ = json(std::forward<V>(v));
    return element_;
  }
  template <class V>
  bool value(V&& v) {
    if (mode_ != Mode::Normal) return fail(mode_ == Mode::Vocab ? "model.vocab must map tokens to ids" : "model.merges must be a list of merges");
    place(std::forward<V>(v));
    return true;
  }

  BpeModel& model_;
  std::string where_;
  std::vector<json*> stack_;
  json* element_ = nullptr;
  json* model_obj_ = nullptr;
  std::string last_key_;
  Mode mode_ = Mode::Normal;
  std::string vkey_, pair_a_, pair_b_;
  int pair_n_ = 0;
};

// A fast reader for the usual layout: walks the document, parsing model.vocab (an object of
// token -> id) and model.merges straight into the model, and returns the rest of the
// document with those two values replaced by null (small, for nlohmann's parser). Anything
// unexpected (including what would be a JSON error) throws Fail.
class FastReader {
 public:
  struct Fail {};
  FastReader(const char* begin, const char* end, BpeModel& model) : begin_(begin), p_(begin), end_(end), model_(model) {}
  bool vocab_seen = false, merges_seen = false;

  std::string run() {
    expect('{');
    bool model_seen = false;
    if (peek() == '}') {
      ++p_;
    } else {
      while (true) {
        read_string(key_);
        expect(':');
        if (key_ == "model" && peek() == '{') {
          if (model_seen) throw Fail{};  // a repeated key: leave it to nlohmann
          model_seen = true;
          model_object();
        } else {
          skip_value();
        }
        if (peek() == ',') {
          ++p_;
          ws();
          continue;
        }
        expect('}');
        break;
      }
    }
    ws();
    if (p_ != end_) throw Fail{};
    std::string rest;
    size_t at = 0;
    for (const auto& [b, e] : cut_) {
      rest.append(begin_ + at, b - at);
      rest += "null";
      at = e;
    }
    rest.append(begin_ + at, size_t(end_ - begin_) - at);
    return rest;
  }

 private:
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  char peek() {
    ws();
    if (p_ >= end_) throw Fail{};
    return *p_;
  }
  void expect(char c) {
    if (peek() != c) throw Fail{};
    ++p_;
  }
  static int hex(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  }
  uint32_t read_u4() {
    if (end_ - p_ < 4) throw Fail{};
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int h = hex(p_[k]);
      if (h < 0) throw Fail{};
      v = v * 16 + uint32_t(h);
    }
    p_ += 4;
    return v;
  }
  void read_string(std::string& out) {
    out.clear();
    expect('"');
    bool high = false;
    while (true) {
      const char* q = p_;
      while (q < end_ && *q != '"' && *q != '\\' && uint8_t(*q) >= 0x20) {
        high = high || uint8_t(*q) >= 0x80;
        ++q;
      }
      out.append(p_, size_t(q - p_));
      p_ = q;
      if (p_ >= end_ || uint8_t(*p_) < 0x20) throw Fail{};
      if (*p_ == '"') {
        ++p_;
        break;
      }
      ++p_;  // a backslash
      if (p_ >= end_) throw Fail{};
      const char e = *p_++;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = read_u4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) throw Fail{};
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') throw Fail{};
            p_ += 2;
            const uint32_t lo = read_u4();
            if (lo < 0xDC00 || lo > 0xDFFF) throw Fail{};
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8_append(out, cp);
          break;
        }
        default:
          throw Fail{};
      }
    }
    if (high && utf8_invalid_offset(out) != std::string_view::npos) throw Fail{};
  }
  void skip_value() {
    const char c = peek();
    if (c == '"') {
      read_string(scratch_);
    } else if (c == '{' || c == '[') {
      ++p_;
      const char close = c == '{' ? '}' : ']';
      if (peek() == close) {
        ++p_;
        return;
      }
      while (true) {
        if (c == '{') {
          read_string(scratch_);
          expect(':');
        }
        skip_value();
        if (peek() == ',') {
          ++p_;
          continue;
        }
        expect(close);
        return;
      }
    } else {  // number or literal: nlohmann checks it later
      while (p_ < end_ && *p_ != ',' && *p_ != '}' && *p_ != ']' && *p_ != ' ' && *p_ != '\n' && *p_ != '\r' &&
             *p_ != '\t')
        ++p_;
    }
  }
  void model_object() {
    expect('{');
    if (peek() == '}') {
      ++p_;
      return;
    }
    while (true) {
      read_string(key_);
      expect(':');
      const char c = peek();
      const size_t from = size_t(p_ - begin_);
      if (key_ == "vocab" && c == '{') {
        if (vocab_seen) throw Fail{};
        vocab();
        vocab_seen = true;
        cut_.emplace_back(from, size_t(p_ - begin_));
      } else if (key_ == "merges" && c == '[') {
        if (merges_seen) throw Fail{};
        merges();
        merges_seen = true;
        cut_.emplace_back(from, size_t(p_ - begin_));
      } else {
        skip_value();
      }
      if (peek() == ',') {
        ++p_;
        continue;
      }
      expect('}');
      return;
    }
  }
  void vocab() {
    expect('{');
    if (peek() == '}') {
      ++p_;
      return;
    }
    while (true) {
      read_string(key_);
      expect(':');
      ws();
      const char* q = p_;
      uint64_t v = 0;
      while (q < end_ && *q >= '0' && *q <= '9' && q - p_ < 11) v = v * 10 + uint64_t(*q++ - '0');
      if (q == p_ || (*p_ == '0' && q - p_ > 1) || v > 0x7FFFFFFF) throw Fail{};
      if (q < end_ && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9'))) throw Fail{};
      p_ = q;
      model_.add_token(key_, int32_t(v));
      if (peek() == ',') {
        ++p_;
        continue;
      }
      expect('}');
      return;
    }
  }
  void merges() {
    expect('[');
    if (peek() == ']') {
      ++p_;
      return;
    }
    while (true) {
      if (peek() == '"') {
        read_string(key_);
        if (!model_.add_merge_line(key_)) throw Fail{};
      } else {
        expect('[');
        read_string(key_);
        expect(',');
        read_string(scratch_);
        expect(']');
        model_.add_merge(key_, scratch_);
      }
      if (peek() == ',') {
        ++p_;
        continue;
      }
      expect(']');
      return;
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  BpeModel& model_;
  std::string key_, scratch_;
  std::vector<std::pair<size_t, size_t>> cut_;
};

// The file, mapped read-only with its pages read in at once (faster than a fault per page).
struct FileBytes {
  const char* data = nullptr;
  size_t size = 0;
  explicit FileBytes(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(path + ": not a regular file");
    }
    size = size_t(st.st_size);
    if (size > 0) {
      void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw Error(path + ": cannot map: " + std::strerror(err));
      }
      data = static_cast<const char*>(p);
    }
    ::close(fd);
  }
  ~FileBytes() {
    if (data) munmap(const_cast<char*>(data), size);
  }
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
};

std::optional<std::string> optional_string(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) throw Error(where + ": model." + key + " must be a string");
  return it->get<std::string>();
}

bool optional_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

struct Tokenizer::Impl {
  std::string path;
  BpeModel model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;
  PostProcessor post;
  std::vector<AddedToken> added;       // as listed in the file
  std::vector<AddedToken> normalized;  // the normalized=true ones, content normalized
  std::unordered_map<int32_t, size_t> added_by_id;
  std::unordered_map<std::string, int32_t> added_by_content;
  AddedTokenMatcher raw_matcher, norm_matcher;
  std::vector<uint8_t> special_text;  // id -> its text is a special token's content
  int32_t id_end = 0;

  std::string_view token_text(int32_t id) const {
    if (auto it = added_by_id.find(id); it != added_by_id.end()) return added[it->second].content;
    return model.id_to_token(id);
  }

  void model_pieces(std::string_view s, bool at_start, std::vector<int32_t>& out, Scratch& scratch) const {
    if (!pre_tokenizer) {
      model.tokenize(s, out);
      return;
    }
    thread_local std::vector<Piece> pieces;
    pieces.clear();
    pre_tokenizer->split({s, at_start}, pieces, scratch);
    for (const Piece& p : pieces) model.tokenize(p.text, out);
  }

  void encode_segment(std::string_view seg, bool at_start, bool parse_special, std::vector<int32_t>& out,
                      Scratch& scratch) const {
    std::string norm;
    std::string_view s = seg;
    if (normalizer && !normalizer->is_identity(seg)) {
      norm.assign(seg);
      normalizer->normalize(norm);
      s = norm;
    }
    if (s.empty()) return;
    if (norm_matcher.empty()) {
      model_pieces(s, at_start, out, scratch);
      return;
    }
    std::vector<AddedTokenMatcher::Segment> segs;
    norm_matcher.split(s, normalized, !parse_special, segs);
    for (const auto& g : segs) {
      if (g.token >= 0) out.push_back(normalized[size_t(g.token)].id);
      else model_pieces(s.substr(g.begin, g.end - g.begin), at_start && g.begin == 0, out, scratch);
    }
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::string Tokenizer::resolve_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string file = (fs::path(path) / "tokenizer.json").string();
    if (!fs::is_regular_file(file, ec)) throw Error(path + ": no tokenizer.json in this directory");
    return file;
  }
  if (!fs::exists(path, ec)) throw Error(path + ": no such file or directory");
  return path;
}

Tokenizer Tokenizer::load(const std::string& path_in) {
  const std::string path = resolve_path(path_in);
  const FileBytes file(path);
  return from_json(std::string_view(file.data, file.size), path);
}

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& where_in) {
  auto impl = std::make_unique<Impl>();
  impl->path = where_in;
  const std::string& where = impl->path;

  {
    const char* begin = text.data();
    const size_t size = text.size();
    impl->model.reserve(size / 75 + 16, size / 4 + 16);  // vocab entries: a guess
    // The fast reader first; anything it does not expect goes to the SAX parser, which
    // also words the errors.
    json root;
    bool vocab_streamed = false, merges_streamed = false;
    try {
      FastReader fast(begin, begin + size, impl->model);
      root = json::parse(fast.run());
      vocab_streamed = fast.vocab_seen;
      merges_streamed = fast.merges_seen;
    } catch (const FastReader::Fail&) {
      root = json();
    } catch (const json::exception&) {
      root = json();
    }
    if (root.is_null()) {
      impl->model = BpeModel();
      impl->model.reserve(size / 75 + 16, size / 4 + 16);
      Loader loader(impl->model, where);
      const bool ok = json::sax_parse(begin, begin + size, &loader, nlohmann::detail::input_format_t::json, true);
      if (!ok || !loader.error.empty())
        throw Error(where + ": " + (loader.error.empty() ? std::string("not valid JSON") : loader.error));
      root = std::move(loader.root);
      vocab_streamed = loader.vocab_streamed;
      merges_streamed = loader.merges_streamed;
    }
    if (!root.is_object()) throw Error(where + ": not a JSON object");
    auto mit = root.find("model");
    if (mit == root.end() || !mit->is_object()) throw Error(where + ": missing key 'model'");
    const json& model = *mit;
    const std::string type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "";
    if (!type.empty() && type != "BPE")
      throw Error(where + ": model type '" + type + "' is not supported (mtb supports BPE)");
    if (type.empty() && !merges_streamed)
      throw Error(where + ": model has no 'type' and no merges: not a BPE model (mtb supports BPE)");
    if (!vocab_streamed) throw Error(where + ": model.vocab is missing or not an object of token -> id");

    BpeOptions& opt = impl->model.options;
    opt.unk_token = optional_string(model, "unk_token", where);
    opt.continuing_subword_prefix = optional_string(model, "continuing_subword_prefix", where).value_or("");
    opt.end_of_word_suffix = optional_string(model, "end_of_word_suffix", where).value_or("");
    opt.fuse_unk = optional_bool(model, "fuse_unk", false);
    opt.byte_fallback = optional_bool(model, "byte_fallback", false);
    opt.ignore_merges = optional_bool(model, "ignore_merges", false);
    if (auto d = model.find("dropout"); d != model.end() && d->is_number() && d->get<double>() > 0.0)
      throw Error(where + ": model.dropout " + d->dump() + " is not supported (BPE dropout is random)");

    // Added tokens.
    if (auto at = root.find("added_tokens"); at != root.end() && !at->is_null()) {
      if (!at->is_array()) throw Error(where + ": added_tokens must be a list");
      int32_t max_added = -1;
      for (const json& t : *at) {
        if (!t.is_object() || !t.contains("id") || !t.contains("content") || !t["id"].is_number_unsigned() ||
            !t["content"].is_string())
          throw Error(where + ": added_tokens: each entry needs an 'id' and a 'content'");
        AddedToken a;
        a.content = t["content"].get<std::string>();
        a.id = t["id"].get<int32_t>();
        a.special = optional_bool(t, "special", false);
        a.single_word = optional_bool(t, "single_word", false);
        a.lstrip = optional_bool(t, "lstrip", false);
        a.rstrip = optional_bool(t, "rstrip", false);
        a.normalized = optional_bool(t, "normalized", !a.special);
        if (a.content.empty() || impl->added_by_content.count(a.content)) continue;
        // Ids are given as the Rust library gives them (the file's "id" is only checked
        // there): the vocab's id of the content, else the next one after the vocab and the
        // added tokens so far.
        const int32_t in_vocab = impl->model.token_to_id(a.content);
        const int32_t vocab_len = int32_t(impl->model.vocab_size());
        if (in_vocab >= 0) a.id = in_vocab;
        else if (max_added < 0) a.id = vocab_len;
        else a.id = (max_added >= vocab_len || vocab_len == 0) ? max_added + 1 : vocab_len;
        max_added = std::max(max_added, a.id);
        impl->added_by_id[a.id] = impl->added.size();
        impl->added_by_content[a.content] = a.id;
        impl->added.push_back(std::move(a));
      }
    }

    BuildContext ctx;
    ctx.where = where;
    const json& normalizer = root.contains("normalizer") ? root["normalizer"] : json();
    const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json();
    const json& decoder = root.contains("decoder") ? root["decoder"] : json();
    const json& post = root.contains("post_processor") ? root["post_processor"] : json();
    const bool defer = pre_tokenizer_ends_in_byte_level(pre) && opt.continuing_subword_prefix.empty() &&
                       opt.end_of_word_suffix.empty();
    impl->normalizer = make_normalizer(normalizer, ctx);
    impl->pre_tokenizer = make_pre_tokenizer(pre, ctx, defer);
    impl->decoder = make_decoder(decoder, ctx);
    impl->model.finalize(defer, where);
    impl->post = make_post_processor(post, ctx);
  }

  // Matchers: tokens with normalized=false match the raw text; the others match the
  // normalized text, in their normalized form. Specials are listed first, as in the Rust library.
  std::vector<size_t> raw_which;
  std::vector<size_t> order;
  for (size_t k = 0; k < impl->added.size(); ++k)
    if (impl->added[k].special) order.push_back(k);
  for (size_t k = 0; k < impl->added.size(); ++k)
    if (!impl->added[k].special) order.push_back(k);
  std::vector<size_t> norm_which;
  for (const size_t k : order) {
    const AddedToken& a = impl->added[k];
    if (!a.normalized) {
      raw_which.push_back(k);
      continue;
    }
    AddedToken n = a;
    if (impl->normalizer) impl->normalizer->normalize(n.content);
    norm_which.push_back(impl->normalized.size());
    impl->normalized.push_back(std::move(n));
  }
  impl->raw_matcher.build(impl->added, raw_which);
  impl->norm_matcher.build(impl->normalized, norm_which);

  int32_t id_end = impl->model.id_end();
  for (const AddedToken& a : impl->added) id_end = std::max(id_end, a.id + 1);
  impl->id_end = id_end;
  // Which ids decode to a special token's text (skipped with skip_special_tokens): the
  // special added tokens, and model tokens spelled like one.
  impl->special_text.assign(size_t(id_end), 0);
  for (const AddedToken& a : impl->added) {
    if (!a.special) continue;
    impl->special_text[size_t(a.id)] = 1;
    const int32_t m = impl->model.token_to_id(a.content);
    if (m >= 0 && impl->token_text(m) == a.content) impl->special_text[size_t(m)] = 1;
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  check_utf8(text, "text to encode");
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = m.post.prefix;
  thread_local Scratch scratch;
  scratch.strings.clear();
  if (m.raw_matcher.empty()) {
    if (!text.empty()) m.encode_segment(text, true, parse_special, ids, scratch);
  } else {
    std::vector<AddedTokenMatcher::Segment> segs;
    m.raw_matcher.split(text, m.added, !parse_special, segs);
    for (const auto& g : segs) {
      if (g.token >= 0) ids.push_back(m.added[size_t(g.token)].id);
      else m.encode_segment(text.substr(g.begin, g.end - g.begin), g.begin == 0, parse_special, ids, scratch);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), m.post.suffix.begin(), m.post.suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= m.id_end) continue;
    const std::string_view t = m.token_text(id);
    if (!t.data()) continue;
    if (skip_special_tokens && m.special_text[size_t(id)]) continue;
    tokens.emplace_back(t);
  }
  std::string out;
  if (!m.decoder) {
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) out += ' ';
      out += tokens[k];
    }
    return out;
  }
  m.decoder->decode_chain(tokens);
  for (const std::string& t : tokens) out += t;
  return out;
}

const std::string& Tokenizer::path() const { return impl_->path; }
int32_t Tokenizer::vocab_size() const { return impl_->id_end; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(std::string(token)); it != impl_->added_by_content.end()) return it->second;
  const int32_t id = impl_->model.token_to_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= impl_->id_end) return std::nullopt;
  const std::string_view t = impl_->token_text(id);
  if (!t.data()) return std::nullopt;
  return std::string(t);
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

const std::vector<int32_t>& Tokenizer::prefix_ids() const { return impl_->post.prefix; }
const std::vector<int32_t>& Tokenizer::suffix_ids() const { return impl_->post.suffix; }

// ---------------------------------------------------------------- streaming

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(&tokenizer), skip_special_(skip_special_tokens) {}

void StreamDecoder::reset() {
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
}

static bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

std::string StreamDecoder::step(int32_t id) {
  // Hugging Face's DecodeStream: decode the previous chunk's ids plus the new ones, and
  // emit what follows the previous chunk's text once it does not end in U+FFFD (an
  // unfinished character).
  ids_.push_back(id);
  const std::string text = tok_->decode(ids_, skip_special_);
  if (text.size() <= prefix_.size() || ends_with_replacement(text)) return {};
  if (text.compare(0, prefix_.size(), prefix_) != 0)
    throw Error("stream decode: the text of earlier tokens changed when token " + std::to_string(id) + " was added");
  std::string fresh = text.substr(prefix_.size());
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + std::ptrdiff_t(prefix_index_));
  prefix_ = tok_->decode(ids_, skip_special_);
  prefix_index_ = new_prefix_index;
  return fresh;
}

std::string StreamDecoder::finish() {
  const std::string text = tok_->decode(ids_, skip_special_);
  std::string rest;
  if (text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0) rest = text.substr(prefix_.size());
  reset();
  return rest;
}

}  // namespace mtb
