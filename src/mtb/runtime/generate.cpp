#include "mtb/runtime/generate.h"

#include <algorithm>
#include <string>

#include "mtb/core/error.h"

namespace mtb {

GenerateStats generate(Session& session, Sampler& sampler, const std::vector<int32_t>& prompt,
                       const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  if (options.max_tokens < 0) throw Error("-n must not be negative");
  const int64_t need = int64_t(session.position()) + int64_t(prompt.size()) + options.max_tokens;
  if (prompt.size() > size_t(session.context()) - size_t(session.position()))
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens is longer than the context of " +
                std::to_string(session.context()) + (session.position() ? " less what is in use" : ""));
  if (need > session.context())
    throw Error("prompt (" + std::to_string(prompt.size()) + ") + -n (" + std::to_string(options.max_tokens) +
                ") tokens exceed the context of " + std::to_string(session.context()));
  GenerateStats st;
  st.prompt_tokens = int(prompt.size());
  auto t0 = clock::now();
  const float* logits = session.prefill(prompt);
  st.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  t0 = clock::now();
  for (int i = 0; i < options.max_tokens; ++i) {
    const int32_t next = sampler.sample(logits, session.tokens());
    ++st.generated_tokens;
    on_token(next);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) {
      st.stopped = true;
      break;
    }
    if (i + 1 < options.max_tokens) logits = session.decode(next);
  }
  st.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return st;
}

}  // namespace mtb
