// The generation loop: one request through the batching engine (the same path, and so the
// same bits, as any batch), each new token handed to a callback as it is produced.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "mtb/runtime/engine.h"
#include "mtb/runtime/sampler.h"

namespace mtb {

struct GenerateOptions {
  int max_tokens = 128;
  std::vector<int32_t> stop_ids;  // generation ends after producing one of these
};

struct GenerateStats {
  int prompt_tokens = 0, generated_tokens = 0;
  int reused_tokens = 0;  // prompt tokens whose KV came from the engine's prefix cache
  double prefill_seconds = 0, decode_seconds = 0;
  bool stopped = false;  // ended on a stop id
  // Prefill speed counts the prompt tokens actually computed.
  double prefill_tokens_per_s() const {
    return prefill_seconds > 0 ? (prompt_tokens - reused_tokens) / prefill_seconds : 0;
  }
  // Decode speed counts the forward passes of generated tokens after the first.
  double decode_tokens_per_s() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0;
  }
};

// Runs the prompt through `engine` (which should hold nothing else) until a stop id,
// max_tokens or the end of the context. Throws mtb::Error, before doing any work, when
// prompt + max_tokens exceeds the engine's context, or for what Engine::submit refuses.
GenerateStats generate(Engine& engine, const std::vector<int32_t>& prompt, const SamplerOptions& sampling,
                       const GenerateOptions& options, const std::function<void(int32_t)>& on_token);

}  // namespace mtb
