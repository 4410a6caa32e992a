#include "mtb/train/corpus.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <numeric>
#include <string_view>
#include <utility>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/core/parallel.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tokenizer/utf8.h"

namespace fs = std::filesystem;

namespace mtb::train {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t") == std::string_view::npos;
}

// The lines of `text` ("\n" or "\r\n" ends; the last line may lack one).
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

// Joins lines [b, e) with "\n" after dropping blank lines at both ends and trailing
// whitespace; empty if nothing is left.
std::string make_document(const std::vector<std::string_view>& lines, size_t b, size_t e) {
  while (b < e && is_blank(lines[b])) ++b;
  while (e > b && is_blank(lines[e - 1])) --e;
  std::string doc;
  for (size_t i = b; i < e; ++i) {
    if (i > b) doc += '\n';
    doc += lines[i];
  }
  while (!doc.empty() && (doc.back() == ' ' || doc.back() == '\t')) doc.pop_back();
  return doc;
}

// The files a corpus path names, in name order.
std::vector<std::string> corpus_files(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error("corpus " + path + ": no such file or directory");
  if (!fs::is_directory(st)) return {path};
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) continue;
    if (name.empty() || name[0] == '.' || name.ends_with(".dat")) continue;
    files.push_back(entry.path().string());
  }
  if (ec) throw Error("corpus " + path + ": cannot read the directory: " + ec.message());
  if (files.empty()) throw Error("corpus " + path + ": the directory holds no text files");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string default_corpus_path() { return "/usr/share/games/fortunes"; }

std::vector<std::string> split_documents(const std::string& text) {
  const std::vector<std::string_view> lines = lines_of(text);
  const bool fortune = std::any_of(lines.begin(), lines.end(), [](std::string_view l) { return l == "%"; });
  std::vector<std::string> docs;
  size_t begin = 0;
  for (size_t i = 0; i <= lines.size(); ++i) {
    const bool cut = i == lines.size() || (fortune ? lines[i] == "%" : is_blank(lines[i]));
    if (!cut) continue;
    std::string doc = make_document(lines, begin, i);
    if (!doc.empty()) docs.push_back(std::move(doc));
    begin = i + 1;
  }
  return docs;
}

Corpus load_corpus(const std::string& path, double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw Error("corpus " + path + ": validation fraction " + std::to_string(val_fraction) + " is outside [0, 1)");
  Corpus corpus;
  corpus.source = path;
  std::vector<std::string> docs;
  for (const std::string& file : corpus_files(path)) {
    const std::string text = read_text_file(file);
    tok::check_utf8(text, file);
    for (std::string& d : split_documents(text)) {
      corpus.bytes += static_cast<int64_t>(d.size());
      docs.push_back(std::move(d));
    }
    ++corpus.files;
  }
  if (docs.empty()) throw Error("corpus " + path + ": no documents (the text is empty or blank)");

  const size_t n = docs.size();
  size_t n_val = static_cast<size_t>(std::llround(static_cast<double>(n) * val_fraction));
  if (val_fraction > 0.0 && n >= 2) n_val = std::clamp<size_t>(n_val, 1, n - 1);
  std::vector<size_t> rank(n);
  std::iota(rank.begin(), rank.end(), size_t{0});
  std::sort(rank.begin(), rank.end(), [](size_t a, size_t b) {
    const uint64_t ha = splitmix64(a), hb = splitmix64(b);
    return ha != hb ? ha < hb : a < b;
  });
  std::vector<char> is_val(n, 0);
  for (size_t r = 0; r < n_val; ++r) is_val[rank[r]] = 1;
  for (size_t i = 0; i < n; ++i) (is_val[i] ? corpus.val : corpus.train).push_back(std::move(docs[i]));
  return corpus;
}

std::vector<int32_t> tokenize_documents(const Tokenizer& tokenizer, const std::vector<std::string>& docs,
                                        int32_t separator_id) {
  // parallel_for hands each thread one contiguous range; gather them in range order.
  // An exception (e.g. a document that is not UTF-8) is carried out of the worker thread.
  std::vector<std::pair<int64_t, std::vector<int32_t>>> parts(static_cast<size_t>(num_threads()));
  std::vector<std::exception_ptr> errors(parts.size());
  parallel_for(static_cast<int64_t>(docs.size()), [&](int64_t b, int64_t e, int t) {
    std::vector<int32_t>& out = parts[static_cast<size_t>(t)].second;
    parts[static_cast<size_t>(t)].first = b;
    try {
      for (int64_t i = b; i < e; ++i) {
        const std::vector<int32_t> ids = tokenizer.encode(docs[static_cast<size_t>(i)], false, false);
        out.insert(out.end(), ids.begin(), ids.end());
        if (separator_id >= 0) out.push_back(separator_id);
      }
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int32_t> tokens;
  size_t total = 0;
  for (const auto& p : parts) total += p.second.size();
  tokens.reserve(total);
  for (const auto& p : parts) tokens.insert(tokens.end(), p.second.begin(), p.second.end());
  return tokens;
}

double unigram_entropy(const std::vector<int32_t>& tokens, int vocab) {
  if (tokens.empty()) throw Error("unigram entropy: no tokens");
  std::vector<int64_t> counts(static_cast<size_t>(std::max(vocab, 0)), 0);
  for (int32_t id : tokens) {
    if (id < 0 || id >= vocab)
      throw Error("unigram entropy: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")");
    ++counts[static_cast<size_t>(id)];
  }
  const double n = static_cast<double>(tokens.size());
  double h = 0.0;
  for (int64_t c : counts)
    if (c > 0) h -= (static_cast<double>(c) / n) * std::log(static_cast<double>(c) / n);
  return h;
}

}  // namespace mtb::train
