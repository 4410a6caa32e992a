// The generation loop: prefill a prompt, then sample and decode until a stop token or the
// token budget, handing each new token to a callback as it is produced.
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "mtb/runtime/sampler.h"
#include "mtb/runtime/session.h"

#pragma once

namespace mtb {

struct GenerateOptions {
  int max_tokens = 128;
  std::vector<int32_t> stop_ids;  // generation ends after producing one of these
};

struct GenerateStats {
  int prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  bool stopped = false;  // ended on a stop id
  double prefill_tokens_per_s() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  // Decode speed counts the forward passes of generated tokens after the first.
  double decode_tokens_per_s() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0;
  }
};

// Throws mtb::Error (before doing any work) when prompt + max_tokens exceeds the context.
GenerateStats generate(Session& session, Sampler& sampler, const std::vector<int32_t>& prompt,
                       const GenerateOptions& options, const std::function<void(int32_t)>& on_token);

}  // namespace mtb
