// Tokenizer speed, one thread: load time of a tokenizer.json and encoding MB/s over a corpus
// (one JSON string per line), medians of several runs. Prints one JSON object.
//   mtb_bench_tokenizer TOKENIZER_JSON CORPUS_JSONL [--runs N] [--load-runs N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mtb/core/error.h"
#include "mtb/tokenizer/tokenizer.h"

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS_JSONL [--runs N] [--load-runs N]\n", argv[0]);
    return 2;
  }
  int runs = 5, load_runs = 5;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--load-runs") load_runs = std::max(1, std::atoi(argv[i + 1]));
  }
  try {
    std::vector<std::string> corpus;
    size_t bytes = 0;
    {
      std::ifstream in(argv[2]);
      if (!in) throw mtb::Error(std::string(argv[2]) + ": cannot open");
      std::string line;
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        corpus.push_back(nlohmann::json::parse(line).get<std::string>());
        bytes += corpus.back().size();
      }
    }
    std::vector<double> load_s;
    for (int r = 0; r < load_runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const mtb::Tokenizer t = mtb::Tokenizer::load(argv[1]);
      load_s.push_back(seconds_since(t0));
    }
    // Each run encodes the corpus with a freshly loaded tokenizer (cold pre-token cache)...
    std::vector<double> cold_mbs, warm_mbs;
    size_t n_tokens = 0;
    for (int r = 0; r < runs; ++r) {
      const mtb::Tokenizer t = mtb::Tokenizer::load(argv[1]);
      for (int pass = 0; pass < 2; ++pass) {  // ... then once more with the cache filled
        n_tokens = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (const std::string& s : corpus) n_tokens += t.encode(s, true, true).size();
        (pass == 0 ? cold_mbs : warm_mbs).push_back(double(bytes) / 1e6 / seconds_since(t0));
      }
    }
    std::printf(
        "{\"engine\": \"mtb\", \"tokenizer\": \"%s\", \"samples\": %zu, \"bytes\": %zu, \"tokens\": %zu, "
        "\"load_s_median\": %.4f, \"encode_mb_per_s_median\": %.3f, \"encode_mb_per_s_warm_median\": %.3f, \"runs\": %d}\n",
        argv[1], corpus.size(), bytes, n_tokens, median(load_s), median(cold_mbs), median(warm_mbs), runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mtb_bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
