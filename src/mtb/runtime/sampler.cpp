#include "mtb/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "mtb/core/error.h"

namespace mtb {

void SamplerOptions::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw Error("--temperature must be >= 0, got " + std::to_string(temperature));
  if (top_k < 0) throw Error("--top-k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw Error("--top-p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p < 1.0f)) throw Error("--min-p must be in [0, 1), got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    throw Error("--repeat-penalty must be > 0, got " + std::to_string(repetition_penalty));
}

Sampler::Sampler(SamplerOptions options, int vocab)
    : o_(options), vocab_(vocab), state_(options.seed ^ 0x853c49e6748fea9bull) {
  o_.validate();
  work_.resize(size_t(vocab)), order_.resize(size_t(vocab)), probs_.resize(size_t(vocab));
  seen_.assign(size_t(vocab), 0u);
}

uint64_t Sampler::next_u64() {  // splitmix64: same stream on every platform
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int Sampler::prepare(const float* logits, const std::vector<int32_t>& history) {
  std::copy(logits, logits + vocab_, work_.begin());
  if (o_.repetition_penalty != 1.0f) {
    // Each seen token once, however often it was seen (as Hugging Face does).
    if (++stamp_ == 0) std::fill(seen_.begin(), seen_.end(), 0u), stamp_ = 1;
    for (int32_t id : history) {
      if (id < 0 || id >= vocab_ || seen_[size_t(id)] == stamp_) continue;
      seen_[size_t(id)] = stamp_;
      float& l = work_[size_t(id)];
      l = l > 0 ? l / o_.repetition_penalty : l * o_.repetition_penalty;
    }
  }
  if (o_.temperature == 0.0f) {
    order_[0] = int32_t(std::max_element(work_.begin(), work_.end()) - work_.begin());
    probs_[0] = 1.0f;
    return 1;
  }
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return work_[size_t(a)] > work_[size_t(b)] || (work_[size_t(a)] == work_[size_t(b)] && a < b);
  };
  // Candidates are order_[0, kept); `sorted` says whether they are best first. Sorting all of
  // a large vocabulary per token is slow, so only what a filter needs is sorted.
  int kept = vocab_;
  int sorted = 0;  // order_[0, sorted) holds the best tokens, best first
  if (o_.top_k > 0 && o_.top_k < vocab_) {
    std::partial_sort(order_.begin(), order_.begin() + o_.top_k, order_.end(), by_logit);
    kept = sorted = o_.top_k;
  }
  // Softmax of logits / temperature over the candidates.
  float mx = -INFINITY;
  for (int i = 0; i < kept; ++i) mx = std::max(mx, work_[size_t(order_[size_t(i)])]);
  const float inv_t = 1.0f / o_.temperature;
  double sum = 0;
  for (int i = 0; i < kept; ++i) sum += work_[size_t(order_[size_t(i)])] = std::exp((work_[size_t(order_[size_t(i)])] - mx) * inv_t);
  for (int i = 0; i < kept; ++i) work_[size_t(order_[size_t(i)])] = float(work_[size_t(order_[size_t(i)])] / sum);
  // From here work_ holds probabilities (same order as the logits).
  if (o_.top_p < 1.0f) {  // the smallest best-first prefix whose mass reaches top_p
    for (int m = 64;; m *= 16) {
      const int want = std::min(m, kept);
      if (want > sorted) {
        std::partial_sort(order_.begin() + sorted, order_.begin() + want, order_.begin() + kept, by_logit);
        sorted = want;
      }
      double cum = 0;
      int n = 0;
      while (n < want && cum < o_.top_p) cum += work_[size_t(order_[size_t(n++)])];
      if (cum >= o_.top_p || want == kept) {
        kept = n;
        break;
      }
    }
  }
  if (o_.min_p > 0.0f) {  // drop tokens below min_p times the best one
    float best = 0;
    for (int i = 0; i < kept; ++i) best = std::max(best, work_[size_t(order_[size_t(i)])]);
    const float floor = o_.min_p * best;
    int n = 0;
    for (int i = 0; i < kept; ++i)
      if (work_[size_t(order_[size_t(i)])] >= floor) order_[size_t(n++)] = order_[size_t(i)];  // keeps the order
    kept = n;
  }
  double mass = 0;
  for (int i = 0; i < kept; ++i) mass += work_[size_t(order_[size_t(i)])];
  for (int i = 0; i < kept; ++i) probs_[size_t(i)] = float(work_[size_t(order_[size_t(i)])] / mass);
  return kept;
}

int32_t Sampler::sample(const float* logits, const std::vector<int32_t>& history) {
  const int kept = prepare(logits, history);
  if (kept == 1) return order_[0];
  const double u = double(next_u64() >> 11) * 0x1.0p-53;  // [0, 1)
  double cum = 0;
  for (int i = 0; i < kept; ++i) {
    cum += probs_[size_t(i)];
    if (u < cum) return order_[size_t(i)];
  }
  return order_[size_t(kept - 1)];
}

std::vector<std::pair<int32_t, float>> Sampler::distribution(const float* logits, const std::vector<int32_t>& history) {
  const int kept = prepare(logits, history);
  std::vector<std::pair<int32_t, float>> d;
  for (int i = 0; i < kept; ++i) d.emplace_back(order_[size_t(i)], probs_[size_t(i)]);
  std::sort(d.begin(), d.end(), [](const auto& a, const auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); });
  return d;
}

}  // namespace mtb
