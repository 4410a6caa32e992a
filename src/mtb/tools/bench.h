// End-to-end speed: prompt processing (prefill of p tokens) and token generation (n decode
// steps after d tokens already in the cache), repeated, as medians.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/model/model.h"
#include "mtb/runtime/session.h"

namespace mtb {

struct BenchOptions {
  int prompt_tokens = 512;  // -p; 0 skips the prompt test
  int gen_tokens = 128;     // -n; 0 skips the generation test
  int depth = 0;            // -d: tokens in the cache before the generation test
  int reps = 3;             // -r
  DType cache_type = DType::F32;
  MlaForm mla = MlaForm::Auto;
  uint64_t seed = 1;
};

struct BenchResult {
  std::vector<double> pp_tokens_per_s, tg_tokens_per_s;  // one per repetition
  int64_t kv_cache_bytes = 0;
  static double median(std::vector<double> v);
};

BenchResult run_bench(const Model& model, const BenchOptions& o);

// What one token costs, counted from the model: the weight bytes a decode step reads (every
// matrix once; the embedding table only when tied, as the LM head), the KV-cache bytes it
// reads at a depth, and the useful FLOPs (2 per weight parameter used, plus attention).
struct TokenCost {
  int64_t weight_bytes = 0;        // per decoded token
  int64_t weight_params = 0;       // matrix parameters used per token (decode)
  int64_t lm_head_params = 0;      // of which the LM head's (a prompt needs it for its last token only)
  int64_t kv_bytes_per_position = 0;  // cache bytes read per cached token per decode step
  // FLOPs of attention for a query at position `pos` (keys 0..pos): 2 (qk + v) dims per head.
  double attention_flops(int64_t pos) const { return double(attn_flops_per_key) * double(pos + 1); }
  int64_t attn_flops_per_key = 0;
};
TokenCost token_cost(const Model& model, int cache_bytes_per_element);

// Peak resident set size of this process so far, in bytes.
int64_t peak_rss_bytes();

}  // namespace mtb
