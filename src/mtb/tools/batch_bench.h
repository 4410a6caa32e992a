// Batched speed, the shape of llama.cpp's llama-batched-bench (-npp P -ntg N -npl 1,2,...):
// for each parallelism B, B sequences of P prompt tokens are prefilled through the batching
// engine, then decode N tokens each, one batch per step. Prompt and decode throughput are
// aggregates over the B sequences. With a shared prefix of S tokens, each prompt is those S
// tokens plus P of its own, all submitted at once: the engine computes the prefix once and the
// others wait a step for it (reported: prefilled vs reused tokens).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "mtb/model/model.h"

namespace mtb {

struct BatchBenchOptions {
  std::vector<int> parallel = {1, 2, 4, 8, 16};
  int prompt_tokens = 128;   // -p per sequence
  int gen_tokens = 128;      // -n decode steps per sequence
  int shared_prefix = 0;     // tokens every prompt begins with
  int reps = 1;
  int batch_tokens = 0;      // tokens per step; 0: every prompt of a run in one step
  int block_size = 16;
  int64_t kv_tokens = 0;     // pool size in token rows; 0: room for every sequence of a run
  DType cache_type = DType::F32;
  MlaForm mla = MlaForm::Auto;
  uint64_t seed = 1;
  void validate() const;     // throws mtb::Error naming the flag
};

struct BatchBenchRow {
  int parallel = 0;
  std::vector<double> pp_tokens_per_s, tg_tokens_per_s;  // one per repetition (aggregates)
  double pp_seconds = 0, tg_seconds = 0;                 // medians
  int64_t prefilled_tokens = 0, reused_tokens = 0;       // of the last repetition
  int peak_blocks = 0, total_blocks = 0, block_size = 0;
  int64_t peak_kv_bytes = 0, pool_bytes = 0;
};

// Runs every parallelism in order; `progress` (if set) hears of each finished one.
std::vector<BatchBenchRow> run_batched_bench(const Model& model, const BatchBenchOptions& o,
                                             const std::function<void(const BatchBenchRow&)>& progress = {});

}  // namespace mtb
