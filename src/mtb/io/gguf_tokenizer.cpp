// The GGUF tokenizer keys <-> Hugging Face tokenizer.json (see gguf_tokenizer.h).
#include "mtb/io/gguf_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/tokenizer/utf8.h"

namespace mtb {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Split regexes of the pre-tokenizers, spelled as in Hugging Face's tokenizer.json files
// (Qwen2/3 and Llama 3) and as llama.cpp lists its fallback set.
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kDefaultRegexes[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

// llama.cpp's names for the pre-tokenizers mtb reads, folded to one name each.
std::string canonical_pre(const std::string& pre) {
  if (pre == "qwen2") return "qwen2";
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return "llama-bpe";
  if (pre == "gpt-2") return "gpt-2";
  if (pre == "default" || pre.empty()) return "default";
  return "";
}

json split_step(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json byte_level_step(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}
json replace_step(const char* from, const char* to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}
const char* const kSpace = "\xE2\x96\x81";  // "▁"

void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

bool is_byte_token(std::string_view t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.substr(0, 3) == "<0x" && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

// Positions where a UTF-8 character starts in `s`, past the first.
std::vector<size_t> char_boundaries(std::string_view s) {
  std::vector<size_t> b;
  for (size_t i = 1; i < s.size(); ++i)
    if ((uint8_t(s[i]) & 0xC0) != 0x80) b.push_back(i);
  return b;
}

// Tokens a BPE model holds in its vocab: gpt2 leaves control and user-defined tokens to the
// added tokens (as Hugging Face's byte-level files do); both leave out unused fillers.
bool in_model_vocab(const GgufTokenizer& t, size_t id) {
  const int32_t ty = t.token_type[id];
  if (ty == kTokUnused) return false;
  if (t.model == "gpt2") return ty != kTokControl && ty != kTokUserDefined;
  return true;
}

}  // namespace

std::vector<std::string> spm_merges_from_scores(const std::vector<std::string>& tokens,
                                                const std::vector<int32_t>& token_type,
                                                const std::vector<float>& scores) {
  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    if (token_type[i] != kTokUnused) id_of.emplace(tokens[i], int32_t(i));  // first wins
  struct Cand {
    float score;
    int32_t id, left, right;
    size_t cut;
  };
  std::vector<Cand> cands;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (token_type[i] != kTokNormal) continue;
    const std::string_view t = tokens[i];
    for (const size_t k : char_boundaries(t)) {
      auto l = id_of.find(t.substr(0, k)), r = id_of.find(t.substr(k));
      if (l != id_of.end() && r != id_of.end()) cands.push_back({scores[i], int32_t(i), l->second, r->second, k});
    }
  }
  std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    return std::make_tuple(-a.score, a.id, a.left, a.right) < std::make_tuple(-b.score, b.id, b.left, b.right);
  });
  std::vector<std::string> merges;
  merges.reserve(cands.size());
  for (const Cand& c : cands) {
    const std::string& t = tokens[size_t(c.id)];
    merges.push_back(t.substr(0, c.cut) + " " + t.substr(c.cut));
  }
  return merges;
}

// ---------------------------------------------------------------- reading

GgufTokenizer read_gguf_tokenizer(const GgufFile& g) {
  const std::string& path = g.path();
  GgufTokenizer t;
  t.chat_template = g.get_string("tokenizer.chat_template", "");
  t.model = g.get_string("tokenizer.ggml.model", "none");
  if (t.model == "none") return t;
  if (t.model != "gpt2" && t.model != "llama")
    throw Error(path + ": tokenizer.ggml.model '" + t.model + "' is not supported (mtb reads gpt2, llama, none)");
  auto array = [&](const std::string& key, GgufType elem, bool required) -> const GgufValue* {
    const GgufValue* v = g.find(key);
    if (!v) {
      if (required) throw Error(path + ": missing metadata key '" + key + "' (tokenizer.ggml.model is " + t.model + ")");
      return nullptr;
    }
    if (v->type != GgufType::ARRAY || v->elem_type != elem)
      throw Error(path + ": metadata key '" + key + "' must be an array of " + gguf_type_name(elem) + ", found " +
                  (v->type == GgufType::ARRAY ? std::string("an array of ") + gguf_type_name(v->elem_type)
                                              : std::string(gguf_type_name(v->type))));
    return v;
  };
  const GgufValue* toks = array("tokenizer.ggml.tokens", GgufType::STRING, true);
  if (toks->count == 0 || toks->count > uint64_t(INT32_MAX))
    throw Error(path + ": tokenizer.ggml.tokens holds " + std::to_string(toks->count) + " tokens");
  const size_t n = size_t(toks->count);
  t.tokens.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view s = toks->strings[i];
    if (tok::utf8_invalid_offset(s) != std::string_view::npos)
      throw Error(path + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is not valid UTF-8");
    t.tokens.emplace_back(s);
  }
  auto check_len = [&](const GgufValue* v, const char* key) {
    if (v && v->count != n)
      throw Error(path + ": " + key + " has " + std::to_string(v->count) + " entries but tokenizer.ggml.tokens has " +
                  std::to_string(n));
  };
  t.token_type.assign(n, kTokNormal);
  if (const GgufValue* v = array("tokenizer.ggml.token_type", GgufType::I32, false)) {
    check_len(v, "tokenizer.ggml.token_type");
    for (size_t i = 0; i < n; ++i) {
      const int64_t ty = v->at(i).i;
      if (ty < kTokNormal || ty > kTokByte)
        throw Error(path + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is " + std::to_string(ty) +
                    " (token types are 1 to 6)");
      t.token_type[i] = int32_t(ty);
    }
  }
  if (t.model == "llama") {
    t.scores.assign(n, 0.0f);
    if (const GgufValue* v = array("tokenizer.ggml.scores", GgufType::F32, false)) {
      check_len(v, "tokenizer.ggml.scores");
      for (size_t i = 0; i < n; ++i) t.scores[i] = float(v->at(i).f);
    }
  }
  if (const GgufValue* v = array("tokenizer.ggml.merges", GgufType::STRING, t.model == "gpt2")) {
    std::unordered_map<std::string_view, int32_t> id_of;
    id_of.reserve(n);
    for (size_t i = 0; i < n; ++i) id_of.emplace(t.tokens[i], int32_t(i));
    t.merges.reserve(size_t(v->count));
    for (uint64_t k = 0; k < v->count; ++k) {
      const std::string_view m = v->strings[size_t(k)];
      const size_t sp = m.find(' ', 1);  // a token may itself be a space (not byte-level ones)
      const std::string at = "tokenizer.ggml.merges[" + std::to_string(k) + "] '" + std::string(m) + "'";
      if (sp == std::string_view::npos || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string_view::npos)
        throw Error(path + ": " + at + " is not two tokens separated by one space");
      const std::string_view a = m.substr(0, sp), b = m.substr(sp + 1);
      if (!id_of.count(a) || !id_of.count(b) || !id_of.count(std::string(a) + std::string(b)))
        throw Error(path + ": " + at + " names a token not in tokenizer.ggml.tokens");
      t.merges.emplace_back(m);
    }
  }
  auto id_key = [&](const char* key, int32_t* out, bool strict) {
    if (!g.has(key)) return;
    const int64_t id = g.get_int(key);
    if (id >= 0 && id < int64_t(n)) *out = int32_t(id);
    else if (strict) throw Error(path + ": " + key + " is " + std::to_string(id) + ", not a token id (" + std::to_string(n) + " tokens)");
  };
  id_key("tokenizer.ggml.bos_token_id", &t.bos, true);
  id_key("tokenizer.ggml.eos_token_id", &t.eos, true);
  id_key("tokenizer.ggml.unknown_token_id", &t.unk, true);
  id_key("tokenizer.ggml.padding_token_id", &t.pad, false);
  auto flag = [&](const char* key, bool dflt) {
    const GgufValue* v = g.find(key);
    if (!v) return dflt;
    if (v->type != GgufType::BOOL) throw Error(path + ": metadata key '" + std::string(key) + "' must be a bool, found " + gguf_type_name(v->type));
    return v->u != 0;
  };
  // llama.cpp's defaults: a BOS for SentencePiece, none for byte-level BPE; a space prefix
  // for SentencePiece.
  t.add_bos = flag("tokenizer.ggml.add_bos_token", t.model == "llama");
  t.add_eos = flag("tokenizer.ggml.add_eos_token", false);
  t.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", t.model == "llama");
  if (t.add_bos && t.bos < 0) throw Error(path + ": tokenizer.ggml.add_bos_token is set but there is no tokenizer.ggml.bos_token_id");
  if (t.add_eos && t.eos < 0) throw Error(path + ": tokenizer.ggml.add_eos_token is set but there is no tokenizer.ggml.eos_token_id");
  if (t.model == "gpt2") {
    const std::string pre = g.get_string("tokenizer.ggml.pre", "default");
    t.pre = canonical_pre(pre);
    if (t.pre.empty())
      throw Error(path + ": tokenizer.ggml.pre '" + pre + "' is not supported (mtb reads qwen2, llama-bpe, gpt-2, default)");
  } else {
    for (size_t i = 0; i < n; ++i)
      if (t.token_type[i] == kTokByte && !is_byte_token(t.tokens[i]))
        throw Error(path + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] '" + t.tokens[i] +
                    "' has token type 6 (byte) but is not spelled <0xNN>");
  }
  return t;
}

std::string gguf_tokenizer_json(const GgufTokenizer& t) {
  const bool spm = t.model == "llama";
  if (!spm && t.model != "gpt2") throw Error("GGUF tokenizer model '" + t.model + "' has no tokenizer.json form");
  const size_t n = t.tokens.size();
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const int32_t ty = t.token_type[i];
    if (ty != kTokControl && ty != kTokUserDefined && !(spm && ty == kTokUnknown)) continue;
    added.push_back({{"id", i},
                     {"content", t.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", ty != kTokUserDefined}});
  }
  json normalizer, pre, decoder, post;
  bool ignore_merges = false;
  if (spm) {
    normalizer = t.add_space_prefix ? json{{"type", "Sequence"},
                                           {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpace}}, replace_step(" ", kSpace)}}}
                                    : replace_step(" ", kSpace);
    json steps = {replace_step(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
    if (t.add_space_prefix) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    decoder = {{"type", "Sequence"}, {"decoders", steps}};
  } else {
    if (t.pre == "qwen2") {
      normalizer = {{"type", "NFC"}};
      pre = {{"type", "Sequence"}, {"pretokenizers", {split_step(kQwen2Regex), byte_level_step(false)}}};
    } else if (t.pre == "llama-bpe") {
      pre = {{"type", "Sequence"}, {"pretokenizers", {split_step(kLlama3Regex), byte_level_step(false)}}};
      ignore_merges = true;
    } else if (t.pre == "gpt-2") {
      pre = byte_level_step(true);
    } else {
      json steps = json::array();
      for (const char* r : kDefaultRegexes) steps.push_back(split_step(r));
      steps.push_back(byte_level_step(false));
      pre = {{"type", "Sequence"}, {"pretokenizers", steps}};
    }
    decoder = byte_level_step(true);
  }
  if ((t.add_bos && t.bos >= 0) || (t.add_eos && t.eos >= 0)) {
    json single = json::array(), specials = json::object();
    auto special = [&](int32_t id) {
      const std::string& s = t.tokens[size_t(id)];
      single.push_back({{"SpecialToken", {{"id", s}, {"type_id", 0}}}});
      specials[s] = {{"id", s}, {"ids", {id}}, {"tokens", {s}}};
    };
    if (t.add_bos) special(t.bos);
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (t.add_eos) special(t.eos);
    post = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  }

  std::string out;
  out.reserve(n * 40 + t.merges.size() * 24 + 4096);
  out += "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":" + added.dump() +
         ",\"normalizer\":" + normalizer.dump() + ",\"pre_tokenizer\":" + pre.dump() +
         ",\"post_processor\":" + post.dump() + ",\"decoder\":" + decoder.dump() +
         ",\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":";
  if (spm && t.unk >= 0) json_string(out, t.tokens[size_t(t.unk)]);
  else out += "null";
  out += ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":";
  out += spm ? "true" : "false";
  out += ",\"byte_fallback\":";
  out += spm ? "true" : "false";
  out += ",\"ignore_merges\":";
  out += ignore_merges ? "true" : "false";
  out += ",\"vocab\":{";
  bool first = true;
  std::unordered_map<std::string_view, bool> seen;
  seen.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!in_model_vocab(t, i) || !seen.emplace(t.tokens[i], true).second) continue;  // first id of a duplicate wins
    if (!first) out += ',';
    first = false;
    json_string(out, t.tokens[i]);
    out += ':' + std::to_string(i);
  }
  out += "},\"merges\":[";
  const std::vector<std::string> derived =
      spm && t.merges.empty() ? spm_merges_from_scores(t.tokens, t.token_type, t.scores) : std::vector<std::string>();
  const std::vector<std::string>& merges = spm && t.merges.empty() ? derived : t.merges;
  for (size_t k = 0; k < merges.size(); ++k) {
    const std::string& m = merges[k];
    const size_t sp = m.find(' ', 1);
    if (k) out += ',';
    out += '[';
    json_string(out, std::string_view(m).substr(0, sp));
    out += ',';
    json_string(out, std::string_view(m).substr(sp + 1));
    out += ']';
  }
  out += "]}}";
  return out;
}

std::string gguf_tokenizer_config_json(const GgufTokenizer& t) {
  json c = json::object();
  c["add_bos_token"] = t.add_bos;
  c["add_eos_token"] = t.add_eos;
  c["bos_token"] = t.bos >= 0 ? json(t.tokens[size_t(t.bos)]) : json();
  c["eos_token"] = t.eos >= 0 ? json(t.tokens[size_t(t.eos)]) : json();
  if (t.unk >= 0) c["unk_token"] = t.tokens[size_t(t.unk)];
  if (t.pad >= 0) c["pad_token"] = t.tokens[size_t(t.pad)];
  if (!t.chat_template.empty()) c["chat_template"] = t.chat_template;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  return c.dump(2) + "\n";
}

Tokenizer load_gguf_tokenizer(const std::string& path) {
  const GgufFile g = GgufFile::open(path);
  const GgufTokenizer t = read_gguf_tokenizer(g);
  if (t.model == "none")
    throw Error(path + ": this GGUF file has no tokenizer (tokenizer.ggml.model is none): it takes token ids only");
  return Tokenizer::from_json(gguf_tokenizer_json(t), path);
}

// ---------------------------------------------------------------- from Hugging Face

namespace {

std::string token_content(const json& j) {  // "text" or {"content": "text", ...}
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

json read_json_file(const std::string& path) {
  try {
    return json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace

GgufTokenizer gguf_tokenizer_from_hf(const std::string& dir, int64_t vocab, std::string* warning) {
  GgufTokenizer t;
  std::error_code ec;
  const std::string file = (fs::path(dir) / "tokenizer.json").string();
  const std::string config_file = (fs::path(dir) / "tokenizer_config.json").string();
  json config = json::object();
  if (fs::is_regular_file(config_file, ec)) config = read_json_file(config_file);
  if (!config.is_object()) config = json::object();
  if (auto ct = config.find("chat_template"); ct != config.end()) {
    if (ct->is_string()) t.chat_template = ct->get<std::string>();
    else if (ct->is_array())
      for (const json& e : *ct)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          t.chat_template = e["template"].get<std::string>();
  }
  const std::string jinja = (fs::path(dir) / "chat_template.jinja").string();
  if (fs::is_regular_file(jinja, ec)) t.chat_template = read_text_file(jinja);
  if (!fs::is_regular_file(file, ec)) return t;

  auto refuse = [&](const std::string& why) {
    if (warning) *warning = file + ": " + why + "; the GGUF file gets no tokenizer (tokenizer.ggml.model = none)";
    GgufTokenizer none;
    none.chat_template = t.chat_template;
    return none;
  };
  const json doc = read_json_file(file);
  const Tokenizer reference = Tokenizer::load(file);  // its checks, and the post-processor's ids
  const json& model = doc.at("model");
  if (model.value("type", "BPE") != "BPE") return refuse("model type '" + model.value("type", "") + "' is not BPE");
  auto flag = [](const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); };
  auto str_or_empty = [](const json& j, const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  if (!str_or_empty(model, "continuing_subword_prefix").empty() || !str_or_empty(model, "end_of_word_suffix").empty())
    return refuse("subword prefixes/suffixes have no GGUF form");

  const json null;
  const json& normalizer = doc.contains("normalizer") ? doc["normalizer"] : null;
  const json& pre = doc.contains("pre_tokenizer") ? doc["pre_tokenizer"] : null;
  const bool byte_fallback = flag(model, "byte_fallback");
  const bool ignore_merges = flag(model, "ignore_merges");
  auto split_regex = [](const json& step) -> std::string {
    if (!step.is_object() || step.value("type", "") != "Split" || step.value("behavior", "") != "Isolated" ||
        step.value("invert", false) || !step.contains("pattern") || !step["pattern"].contains("Regex"))
      return "";
    return step["pattern"]["Regex"].get<std::string>();
  };
  if (!byte_fallback) {
    // Byte-level BPE: which of llama.cpp's pre-tokenizers is this one?
    std::string name;
    if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
        pre["pretokenizers"].size() == 2) {
      const json& bl = pre["pretokenizers"][1];
      const std::string rx = split_regex(pre["pretokenizers"][0]);
      if (bl.value("type", "") == "ByteLevel" && !bl.value("use_regex", true) && !bl.value("add_prefix_space", true)) {
        if (rx == kQwen2Regex) name = "qwen2";
        else if (rx == kLlama3Regex) name = "llama-bpe";
      }
    } else if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true) &&
               !pre.value("add_prefix_space", true)) {
      name = "gpt-2";
    }
    if (name.empty()) return refuse("its pre-tokenizer is none of llama.cpp's qwen2, llama-bpe, gpt-2");
    const json want_norm = name == "qwen2" ? json{{"type", "NFC"}} : json();
    if (normalizer != want_norm) return refuse("its normalizer " + normalizer.dump() + " does not go with pre-tokenizer " + name);
    if (ignore_merges != (name == "llama-bpe"))
      return refuse(std::string("model.ignore_merges ") + (ignore_merges ? "true" : "false") + " does not go with pre-tokenizer " + name);
    t.model = "gpt2";
    t.pre = name;
  } else {
    // SentencePiece-style BPE: spaces become "▁" in the normalizer, with or without a "▁"
    // put in front; nothing else splits the text.
    const json replace = replace_step(" ", kSpace);
    const json prefixed = {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpace}}, replace}}};
    auto same_replace = [&](const json& j) {
      return j.is_object() && j.value("type", "") == "Replace" && j.contains("pattern") && j["pattern"] == replace["pattern"] &&
             j.value("content", "") == kSpace;
    };
    const bool with_prefix = normalizer.is_object() && normalizer.value("type", "") == "Sequence" &&
                             normalizer.contains("normalizers") && normalizer["normalizers"].size() == 2 &&
                             normalizer["normalizers"][0] == prefixed["normalizers"][0] &&
                             same_replace(normalizer["normalizers"][1]);
    if (!with_prefix && !same_replace(normalizer))
      return refuse("a SentencePiece-style tokenizer whose normalizer is not Replace(' ', '▁') (with or without Prepend('▁'))");
    const bool space_split = pre.is_object() && pre.value("type", "") == "Split" && pre.contains("pattern") &&
                             pre["pattern"] == json{{"String", " "}};  // a no-op after the normalizer
    if (!pre.is_null() && !space_split) return refuse("a SentencePiece-style tokenizer with a pre-tokenizer " + pre.value("type", ""));
    if (ignore_merges) return refuse("model.ignore_merges has no SentencePiece form");
    t.model = "llama";
    t.add_space_prefix = with_prefix;
  }

  // Tokens by id: the model's vocab, then the added tokens.
  const int64_t n_tok = reference.vocab_size();
  if (n_tok > vocab)
    throw Error(file + ": the tokenizer has " + std::to_string(n_tok) + " tokens but the model has only " +
                std::to_string(vocab) + " rows of embeddings");
  const size_t n = size_t(vocab);
  t.tokens.assign(n, "");
  t.token_type.assign(n, 0);
  for (const auto& [tok, id] : model.at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    if (i >= 0 && i < vocab && t.token_type[size_t(i)] == 0) {
      t.tokens[size_t(i)] = tok;
      t.token_type[size_t(i)] = kTokNormal;
    }
  }
  bool lossy_added = false;
  if (doc.contains("added_tokens") && doc["added_tokens"].is_array())
    for (const json& a : doc["added_tokens"]) {
      const std::string content = a.value("content", "");
      const std::optional<int32_t> id = reference.token_to_id(content);
      if (!id || *id >= vocab) continue;
      const bool special = a.value("special", false);
      lossy_added = lossy_added || a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false);
      t.tokens[size_t(*id)] = content;
      t.token_type[size_t(*id)] = special ? kTokControl : kTokUserDefined;
    }
  if (lossy_added && warning)
    *warning = file + ": added tokens with lstrip/rstrip/single_word: GGUF does not hold these flags";
  const std::string unk = str_or_empty(model, "unk_token");
  for (size_t i = 0; i < n; ++i) {
    if (t.token_type[i] == 0) {
      t.tokens[i] = "[PAD" + std::to_string(i) + "]";  // as llama.cpp's converter fills gaps
      t.token_type[i] = kTokUnused;
    } else if (t.model == "llama" && t.token_type[i] == kTokNormal && is_byte_token(t.tokens[i])) {
      t.token_type[i] = kTokByte;
    }
  }
  if (!unk.empty())
    if (auto id = reference.token_to_id(unk); id && *id < vocab) {
      t.unk = *id;
      if (t.model == "llama") t.token_type[size_t(*id)] = kTokUnknown;
    }

  // Merges: gpt2 keeps them; SentencePiece gets scores that rank them (-rank of the first merge
  // making each token), and the merges too when those scores do not give them back.
  std::vector<std::string> merges;
  const json& jm = model.contains("merges") ? model["merges"] : null;
  if (jm.is_array())
    for (const json& m : jm) {
      if (m.is_string()) merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
  if (t.model == "gpt2") {
    t.merges = std::move(merges);
  } else {
    std::unordered_map<std::string_view, int32_t> id_of;
    for (size_t i = 0; i < n; ++i)
      if (t.token_type[i] != kTokUnused) id_of.emplace(t.tokens[i], int32_t(i));
    t.scores.assign(n, 0.0f);
    std::vector<uint8_t> made(n, 0);
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      const std::string joined = m.substr(0, sp) + m.substr(sp + 1);
      auto it = id_of.find(joined);
      if (it == id_of.end() || made[size_t(it->second)]) continue;
      made[size_t(it->second)] = 1;
      t.scores[size_t(it->second)] = -float(r);
    }
    for (size_t i = 0; i < n; ++i)  // normal tokens no merge makes: last
      if (!made[i] && t.token_type[i] == kTokNormal && char_boundaries(t.tokens[i]).size() > 0)
        t.scores[i] = -float(merges.size() + i);
    if (spm_merges_from_scores(t.tokens, t.token_type, t.scores) != merges) t.merges = std::move(merges);
  }

  // Special tokens: what the post-processor adds decides add_bos/add_eos.
  auto id_of_config = [&](const char* key) -> int32_t {
    if (!config.contains(key)) return -1;
    const std::string s = token_content(config[key]);
    const auto id = s.empty() ? std::nullopt : reference.token_to_id(s);
    return id && *id < vocab ? *id : -1;
  };
  t.bos = id_of_config("bos_token");
  t.eos = id_of_config("eos_token");
  t.pad = id_of_config("pad_token");
  const std::vector<int32_t>& prefix = reference.prefix_ids();
  const std::vector<int32_t>& suffix = reference.suffix_ids();
  if (prefix.size() > 1 || suffix.size() > 1)
    return refuse("its post-processor adds more than one token at an end");
  if (!prefix.empty()) t.bos = prefix[0], t.add_bos = true;
  if (!suffix.empty()) t.eos = suffix[0], t.add_eos = true;
  return t;
}

}  // namespace mtb
