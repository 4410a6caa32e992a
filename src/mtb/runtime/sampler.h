// Choosing the next token from logits: repetition penalty, then temperature, top-k, top-p,
// min-p (the order Hugging Face applies them), then a draw from a seeded generator.
// Temperature 0 is greedy. Nothing allocates per token.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace mtb {

struct SamplerOptions {
  float temperature = 1.0f;        // 0: greedy (argmax)
  int top_k = 0;                   // 0: off
  float top_p = 1.0f;              // in (0, 1]; 1: off
  float min_p = 0.0f;              // in [0, 1); 0: off
  float repetition_penalty = 1.0f; // > 0; 1: off. Logits of seen tokens: / p if > 0, * p if < 0
  uint64_t seed = 0;
  // Throws mtb::Error naming the flag for a value out of range.
  void validate() const;
};

class Sampler {
 public:
  Sampler(SamplerOptions options, int vocab);
  // Picks a token; `history` holds the tokens seen so far (for the repetition penalty).
  int32_t sample(const float* logits, const std::vector<int32_t>& history);
  // The distribution sample() draws from, as (token, probability) sorted by probability,
  // zero-probability tokens left out. Greedy gives one token with probability 1.
  std::vector<std::pair<int32_t, float>> distribution(const float* logits, const std::vector<int32_t>& history);

 private:
  int prepare(const float* logits, const std::vector<int32_t>& history);  // fills probs_/order_, returns kept count
  uint64_t next_u64();

  SamplerOptions o_;
  int vocab_;
  uint64_t state_;
  std::vector<float> work_;      // logits after the penalty
  std::vector<int32_t> order_;   // candidate ids, best first
  std::vector<float> probs_;     // their probabilities
  std::vector<uint32_t> seen_;   // repetition penalty: stamp_ marks tokens already penalized
  uint32_t stamp_ = 0;
};

}  // namespace mtb
