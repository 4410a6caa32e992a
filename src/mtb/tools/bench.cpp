#include "mtb/tools/bench.h"

#include <algorithm>
#include <chrono>

#include <sys/resource.h>

#include "mtb/core/error.h"
#include "mtb/model/weights.h"

namespace mtb {

double BenchResult::median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

BenchResult run_bench(const Model& model, const BenchOptions& o) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& c = model.config();
  if (o.prompt_tokens < 0 || o.gen_tokens < 0 || o.depth < 0 || o.reps < 1)
    throw Error("bench: -p, -n, -d must be >= 0 and -r >= 1");
  const int context = std::max(o.prompt_tokens, o.depth + o.gen_tokens + 1);
  if (c.max_context > 0 && context > c.max_context)
    throw Error("bench needs " + std::to_string(context) + " tokens of context; the model has " +
                std::to_string(c.max_context));
  SessionOptions so;
  so.context = context, so.cache_type = o.cache_type, so.mla = o.mla;
  so.prefill_chunk = std::max(1, std::min(512, std::max(o.prompt_tokens, o.depth)));
  Session s(model, so);
  // Token ids from a fixed stream: the same work in every run.
  uint64_t state = o.seed;
  auto next_id = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return int32_t((state >> 33) % uint64_t(c.vocab));
  };
  std::vector<int32_t> prompt(size_t(o.prompt_tokens)), depth(size_t(o.depth));
  for (auto& id : prompt) id = next_id();
  for (auto& id : depth) id = next_id();
  BenchResult r;
  for (int rep = 0; rep < o.reps && o.prompt_tokens > 0; ++rep) {
    s.reset();
    const auto t0 = clock::now();
    s.prefill(prompt);
    r.pp_tokens_per_s.push_back(o.prompt_tokens / std::chrono::duration<double>(clock::now() - t0).count());
  }
  if (o.gen_tokens > 0) {
    // The depth is prefilled once; each repetition rewinds to it and decodes again.
    s.reset();
    if (o.depth > 0) s.prefill(depth);
    const int32_t first = next_id();
    for (int rep = 0; rep < o.reps; ++rep) {
      s.rewind(o.depth);
      int32_t id = first;
      const auto t0 = clock::now();
      for (int i = 0; i < o.gen_tokens; ++i) {
        const float* logits = s.decode(id);
        id = int32_t(std::max_element(logits, logits + c.vocab) - logits);  // greedy: what generation does
      }
      r.tg_tokens_per_s.push_back(o.gen_tokens / std::chrono::duration<double>(clock::now() - t0).count());
    }
  }
  r.kv_cache_bytes = s.cache().bytes();
  return r;
}

TokenCost token_cost(const Model& model, int cache_bytes_per_element) {
  const ModelConfig& c = model.config();
  TokenCost t;
  for (const TensorSpec& s : expected_tensors(c)) {
    if (s.role != TensorRole::Matrix || s.name == kPositionEmbedding) continue;
    if (s.name == kTokenEmbedding && !c.tied_embeddings) continue;  // a lookup reads one row
    const NamedTensor* nt = model.tensors().find(s.name);
    if (!nt) continue;
    t.weight_bytes += int64_t(nt->tensor.nbytes());
    t.weight_params += nt->tensor.numel();
    if (s.name == kLmHead || s.name == kTokenEmbedding) t.lm_head_params = nt->tensor.numel();
  }
  t.kv_bytes_per_position = c.kv_bytes_per_token(cache_bytes_per_element);
  // MLA attends (absorbed) with kv_lora + rope dims for scores and kv_lora for values.
  const int64_t qk = c.is_mla() ? c.kv_lora_rank + c.qk_rope_head_dim : c.head_dim;
  const int64_t v = c.is_mla() ? c.kv_lora_rank : c.head_dim;
  t.attn_flops_per_key = 2 * int64_t(c.n_layers) * c.n_heads * (qk + v);
  return t;
}

int64_t peak_rss_bytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

}  // namespace mtb
