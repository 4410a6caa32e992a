#include "mtb/runtime/generate.h"

#include <algorithm>
#include <string>

#include "mtb/core/error.h"

namespace mtb {

GenerateStats generate(Engine& engine, const std::vector<int32_t>& prompt, const SamplerOptions& sampling,
                       const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  if (options.max_tokens < 0) throw Error("-n must not be negative");
  const int context = engine.context();
  if (prompt.size() > size_t(context))
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens is longer than the context of " +
                std::to_string(context));
  if (int64_t(prompt.size()) + options.max_tokens > context)
    throw Error("prompt (" + std::to_string(prompt.size()) + ") + -n (" + std::to_string(options.max_tokens) +
                ") tokens exceed the context of " + std::to_string(context));
  GenerateStats st;
  st.prompt_tokens = int(prompt.size());
  Request r;
  r.prompt = prompt, r.sampling = sampling, r.max_tokens = options.max_tokens, r.stop_ids = options.stop_ids;
  auto t0 = clock::now();
  bool first = true;
  r.on_token = [&](const TokenEvent& e) {
    if (first) {  // the prompt is in: the rest is decoding
      const auto now = clock::now();
      st.prefill_seconds = std::chrono::duration<double>(now - t0).count();
      t0 = now, first = false;
    }
    st.reused_tokens = e.reused;
    if (e.token >= 0) {
      ++st.generated_tokens;
      on_token(e.token);
    }
    if (e.finish == FinishReason::Stop) st.stopped = true;
  };
  engine.submit(std::move(r));
  engine.run();
  if (!first) st.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return st;
}

}  // namespace mtb
