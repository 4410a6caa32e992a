#include "mtb/tokenizer/trainer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <string_view>
#include <unordered_map>

#include "mtb/core/error.h"
#include "mtb/tokenizer/byte_level.h"
#include "mtb/tokenizer/regex.h"
#include "mtb/tokenizer/utf8.h"

namespace mtb::tok {

// Llama 3's pre-tokenizer pattern (as in its tokenizer.json).
const char* const kSplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

using PairKey = uint64_t;  // (left id << 32) | right id: ordering keys orders pairs
PairKey key_of(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t left_of(PairKey k) { return int32_t(k >> 32); }
int32_t right_of(PairKey k) { return int32_t(k & 0xFFFFFFFFu); }

struct HeapEntry {
  int64_t count;
  PairKey pair;
  // The max-heap's top: the highest count, then the smallest pair.
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

// Distinct pre-tokens of the documents with their counts, in byte order.
std::vector<std::pair<std::string, int64_t>> count_pre_tokens(const std::vector<std::string>& documents,
                                                              int64_t& total) {
  const Regex re = Regex::pattern(kSplitPattern, "the BPE trainer's split pattern");
  std::unordered_map<std::string, int64_t> counts;
  std::vector<Span> spans;
  total = 0;
  for (const std::string& doc : documents) {
    check_utf8(doc, "BPE training text");
    spans.clear();
    re.find_all(doc, spans);
    // Split's "Isolated" behavior: matches and the text between them are all pieces.
    uint32_t at = 0;
    auto add = [&](uint32_t b, uint32_t e) {
      if (e <= b) return;
      ++counts[doc.substr(b, e - b)];
      ++total;
    };
    for (const Span& s : spans) {
      add(at, s.first);
      add(s.first, s.second);
      at = s.second;
    }
    add(at, static_cast<uint32_t>(doc.size()));
  }
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

std::string byte_level_string(std::string_view bytes) {
  std::string s;
  for (char c : bytes) utf8_append(s, byte_level_alphabet().to_char[static_cast<uint8_t>(c)]);
  return s;
}

}  // namespace

TrainedBpe train_bpe(const std::vector<std::string>& documents, const BpeTrainOptions& options) {
  const auto n_special = static_cast<int64_t>(options.special_tokens.size());
  if (options.vocab_size < 256 + n_special)
    throw Error("vocab size " + std::to_string(options.vocab_size) + " is below 256 bytes + " +
                std::to_string(n_special) + " special tokens = " + std::to_string(256 + n_special));
  std::set<std::string> seen;
  for (const std::string& s : options.special_tokens) {
    if (s.empty()) throw Error("special token: empty string");
    check_utf8(s, "special token");
    if (!seen.insert(s).second) throw Error("special token '" + s + "' is given twice");
  }

  TrainedBpe model;
  const auto words_counted = count_pre_tokens(documents, model.pre_tokens);
  if (words_counted.empty()) throw Error("BPE training: no text (the corpus is empty)");
  model.words = static_cast<int64_t>(words_counted.size());

  // Words as symbol ids (bytes at first) with their frequencies.
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  words.reserve(words_counted.size());
  for (const auto& [w, c] : words_counted) {
    std::vector<int32_t> syms;
    for (char ch : w) syms.push_back(static_cast<uint8_t>(ch));
    words.push_back(std::move(syms));
    freq.push_back(c);
  }

  for (int b = 0; b < 256; ++b) model.tokens.emplace_back(1, static_cast<char>(b));
  std::unordered_map<std::string, int32_t> token_id;
  for (int b = 0; b < 256; ++b) token_id[model.tokens[size_t(b)]] = b;
  // Learned tokens may not spell a special token (the Rust library would give the special
  // token the learned token's id).
  std::set<std::string> forbidden;
  for (const std::string& s : options.special_tokens) forbidden.insert(byte_level_string(s));

  // Pair counts, the words each pair occurs in (a superset: stale entries are skipped), and
  // a lazy max-heap: every pair with a positive count has an entry of at least that count.
  std::unordered_map<PairKey, int64_t> pair_count;
  std::unordered_map<PairKey, std::vector<int32_t>> pair_words;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const PairKey k = key_of(s[i], s[i + 1]);
      pair_count[k] += freq[w];
      auto& list = pair_words[k];
      if (list.empty() || list.back() != int32_t(w)) list.push_back(int32_t(w));
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, k});

  const int64_t target = options.vocab_size - n_special;  // bytes + learned tokens
  const int64_t wanted = target - 256;
  std::vector<int64_t> seen_in_merge(words.size(), -1);
  std::unordered_map<PairKey, int64_t> delta;
  int64_t next_report = 0;
  while (static_cast<int64_t>(model.tokens.size()) < target && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const auto it = pair_count.find(top.pair);
    const int64_t current = it == pair_count.end() ? 0 : it->second;
    if (current != top.count) {  // stale: put back with its true count
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current < std::max<int64_t>(options.min_frequency, 1)) break;
    const int32_t a = left_of(top.pair), b = right_of(top.pair);
    std::string bytes = model.tokens[size_t(a)] + model.tokens[size_t(b)];
    if (forbidden.count(byte_level_string(bytes))) {
      pair_count.erase(top.pair);  // never merged; the pair stays two symbols
      continue;
    }
    int32_t id;
    if (const auto found = token_id.find(bytes); found != token_id.end()) {
      id = found->second;
    } else {
      id = static_cast<int32_t>(model.tokens.size());
      token_id.emplace(bytes, id);
      model.tokens.push_back(std::move(bytes));
    }
    const int64_t merge_index = static_cast<int64_t>(model.merges.size());
    model.merges.emplace_back(a, b);

    // Rewrite every word holding (a, b): take its pairs out, merge, put its pairs back.
    const std::vector<int32_t> holders = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    delta.clear();
    for (const int32_t w : holders) {
      if (seen_in_merge[size_t(w)] == merge_index) continue;
      seen_in_merge[size_t(w)] = merge_index;
      std::vector<int32_t>& s = words[size_t(w)];
      bool holds = false;
      for (size_t i = 0; i + 1 < s.size() && !holds; ++i) holds = s[i] == a && s[i + 1] == b;
      if (!holds) continue;
      const int64_t f = freq[size_t(w)];
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[key_of(s[i], s[i + 1])] -= f;
      size_t out = 0;
      for (size_t i = 0; i < s.size(); ++out) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          s[out] = id;
          i += 2;
        } else {
          s[out] = s[i++];
        }
      }
      s.resize(out);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const PairKey k = key_of(s[i], s[i + 1]);
        delta[k] += f;
        if (s[i] == id || s[i + 1] == id) {  // a pair new to this word
          auto& list = pair_words[k];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_count[k];
      c += d;
      if (c <= 0) pair_count.erase(k);
      else if (d > 0) heap.push({c, k});
    }
    const int64_t done = static_cast<int64_t>(model.merges.size());
    if (options.progress && (done >= next_report || static_cast<int64_t>(model.tokens.size()) == target)) {
      options.progress(std::min(done, wanted), wanted);
      next_report = done + std::max<int64_t>(1, wanted / 100);
    }
  }
  model.complete = static_cast<int64_t>(model.tokens.size()) == target;
  for (const std::string& s : options.special_tokens) {
    model.tokens.push_back(s);
    model.special_tokens.push_back(s);
  }
  return model;
}

std::string bpe_tokenizer_json(const TrainedBpe& model) {
  using ojson = nlohmann::ordered_json;
  const auto n_special = static_cast<int32_t>(model.special_tokens.size());
  const int32_t n_model = model.vocab_size() - n_special;
  ojson vocab = ojson::object();
  for (int32_t id = 0; id < n_model; ++id) vocab[byte_level_string(model.tokens[size_t(id)])] = id;
  ojson merges = ojson::array();
  for (const auto& [a, b] : model.merges)
    merges.push_back(byte_level_string(model.tokens[size_t(a)]) + " " + byte_level_string(model.tokens[size_t(b)]));
  ojson added = ojson::array();
  for (int32_t i = 0; i < n_special; ++i)
    added.push_back({{"id", n_model + i},
                     {"content", model.special_tokens[size_t(i)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  ojson j = ojson::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       ojson::array({ojson{{"type", "Split"}, {"pattern", {{"Regex", kSplitPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                     ojson{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(1) + "\n";
}

}  // namespace mtb::tok
