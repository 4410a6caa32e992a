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

}  // namespace mtb
