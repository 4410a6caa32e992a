// Session: one conversation with a model. It owns the KV cache (sized once) and the
// workspace, prefills prompts in chunks, then decodes one token at a time without
// allocating.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/model/kv_cache.h"
#include "mtb/model/model.h"

namespace mtb {

struct SessionOptions {
  int context = 0;                 // tokens the cache holds; 0: the model's max_context
  DType cache_type = DType::F32;   // KV cache elements: F32, BF16 or F16
  MlaForm mla = MlaForm::Auto;     // how MLA attends (see model.h)
  int prefill_chunk = 256;         // tokens per forward call while prefilling
};

class Session {
 public:
  // Throws mtb::Error when the context is impossible (<= 0, or past the model's).
  Session(const Model& model, SessionOptions options);

  // Appends tokens to the context and returns the logits [vocab] after the last one.
  // Throws mtb::Error, appending nothing, if they do not fit or an id is out of range.
  const float* prefill(const std::vector<int32_t>& ids);
  // Appends one token and returns the logits after it.
  const float* decode(int32_t id);

  void reset();  // forget everything (the cache keeps its memory)
  // Keep only the first n tokens (n <= position()): what follows is forgotten, so a
  // conversation whose re-rendered text diverges from the cache re-prefills only the rest.
  void rewind(int n);
  int position() const { return cache_.size(); }
  int context() const { return cache_.capacity(); }
  const KVCache& cache() const { return cache_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const Model& model() const { return model_; }

 private:
  const Model& model_;
  SessionOptions options_;
  KVCache cache_;
  Workspace ws_;
  std::vector<int32_t> tokens_;
};

}  // namespace mtb
