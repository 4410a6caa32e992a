#include "mtb/tools/batch_bench.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>

#include "mtb/core/error.h"
#include "mtb/runtime/engine.h"
#include "mtb/tools/bench.h"

namespace mtb {

void BatchBenchOptions::validate() const {
  if (parallel.empty()) throw Error("--parallel needs at least one count");
  for (int p : parallel)
    if (p <= 0) throw Error("--parallel counts must be positive, got " + std::to_string(p));
  if (prompt_tokens <= 0) throw Error("-p must be positive with --parallel");
  if (gen_tokens < 0) throw Error("-n must not be negative");
  if (shared_prefix < 0) throw Error("--shared-prefix must not be negative");
  if (reps < 1) throw Error("-r must be at least 1");
  if (batch_tokens < 0) throw Error("--batch-tokens must not be negative");
  if (kv_tokens < 0) throw Error("--kv-budget must not be negative");
}

std::vector<BatchBenchRow> run_batched_bench(const Model& model, const BatchBenchOptions& o,
                                             const std::function<void(const BatchBenchRow&)>& progress) {
  using clock = std::chrono::steady_clock;
  o.validate();
  const ModelConfig& c = model.config();
  const int per_seq = o.shared_prefix + o.prompt_tokens + o.gen_tokens + 1;
  if (c.max_context > 0 && per_seq > c.max_context)
    throw Error("bench needs " + std::to_string(per_seq) + " tokens per sequence; the model has " +
                std::to_string(c.max_context));
  std::vector<BatchBenchRow> rows;
  for (int B : o.parallel) {
    BatchBenchRow row;
    row.parallel = B;
    EngineOptions eo;
    eo.block_size = o.block_size;
    eo.kv_tokens = o.kv_tokens > 0 ? o.kv_tokens : int64_t(B) * ((per_seq + o.block_size - 1) / o.block_size + 1) * o.block_size;
    eo.max_seqs = B;
    eo.batch_tokens = o.batch_tokens > 0 ? o.batch_tokens : std::max(512, B * (o.shared_prefix + o.prompt_tokens));
    eo.context = per_seq;
    eo.cache_type = o.cache_type, eo.mla = o.mla;
    Engine engine(model, eo);
    std::vector<double> pp_s, tg_s;
    for (int rep = 0; rep < o.reps; ++rep) {
      // Prompts of seeded random ids, new for every repetition (no prefix cache hits but the
      // shared prefix); greedy, no stop ids: every sequence decodes N tokens.
      std::mt19937_64 rng(o.seed * 1000003 + uint64_t(rep) * 7919 + uint64_t(B));
      std::uniform_int_distribution<int> id(0, c.vocab - 1);
      std::vector<int32_t> prefix(size_t(o.shared_prefix));
      for (auto& t : prefix) t = id(rng);
      std::vector<Request> reqs(static_cast<size_t>(B));
      int first_tokens = 0;
      for (auto& r : reqs) {
        r.prompt = prefix;
        for (int i = 0; i < o.prompt_tokens; ++i) r.prompt.push_back(id(rng));
        r.max_tokens = o.gen_tokens + 1, r.sampling.temperature = 0.0f;
        r.on_token = [&first_tokens](const TokenEvent& e) {
          if (e.index == 0 && e.token >= 0) ++first_tokens;
        };
      }
      const EngineStats before = engine.stats();
      const auto t0 = clock::now();
      for (auto& r : reqs) engine.submit(std::move(r));  // (the engine has the shared prefix computed once)
      while (first_tokens < B) engine.step();
      const auto t1 = clock::now();
      engine.run();
      const auto t2 = clock::now();
      const double tp = std::chrono::duration<double>(t1 - t0).count();
      const double tg = std::chrono::duration<double>(t2 - t1).count();
      pp_s.push_back(tp), tg_s.push_back(tg);
      row.pp_tokens_per_s.push_back(double(B) * (o.shared_prefix + o.prompt_tokens) / tp);
      row.tg_tokens_per_s.push_back(tg > 0 ? double(B) * o.gen_tokens / tg : 0);
      row.prefilled_tokens = engine.stats().prefilled_tokens - before.prefilled_tokens;
      row.reused_tokens = engine.stats().reused_tokens - before.reused_tokens;
    }
    row.pp_seconds = BenchResult::median(pp_s), row.tg_seconds = BenchResult::median(tg_s);
    row.peak_blocks = engine.stats().peak_blocks, row.total_blocks = engine.pool().n_blocks();
    row.block_size = o.block_size;
    row.pool_bytes = engine.cache().bytes();
    row.peak_kv_bytes = row.pool_bytes / row.total_blocks * row.peak_blocks;
    if (progress) progress(row);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace mtb
