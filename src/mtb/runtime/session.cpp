#include "mtb/runtime/session.h"

#include <algorithm>
#include <string>

#include "mtb/core/error.h"

namespace mtb {
namespace {

int checked_context(const Model& m, const SessionOptions& o) {
  if (o.prefill_chunk <= 0) throw Error("prefill chunk must be positive");
  return m.config().context_for(o.context);
}

}  // namespace

Session::Session(const Model& model, SessionOptions options)
    : model_(model),
      options_(options),
      cache_(model.config(), checked_context(model, options), options.cache_type),
      ws_(model.make_workspace(std::min(options.prefill_chunk, cache_.capacity()), cache_.capacity(), options.mla)) {
  tokens_.reserve(size_t(cache_.capacity()));
}

const float* Session::prefill(const std::vector<int32_t>& ids) {
  if (ids.empty()) throw Error("nothing to prefill: empty token list");
  if (position() + int64_t(ids.size()) > context())
    throw Error("prompt of " + std::to_string(ids.size()) + " tokens does not fit: " + std::to_string(position()) +
                " of " + std::to_string(context()) + " context tokens are in use");
  const int vocab = model_.config().vocab;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error("token id " + std::to_string(ids[i]) + " at prompt position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  ForwardOptions fo;
  fo.mla = options_.mla;
  const float* logits = nullptr;
  for (size_t start = 0; start < ids.size(); start += size_t(ws_.max_tokens)) {
    const int n = int(std::min(ids.size() - start, size_t(ws_.max_tokens)));
    logits = model_.forward(ids.data() + start, n, cache_, ws_, fo);
  }
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  return logits;
}

const float* Session::decode(int32_t id) {
  ForwardOptions fo;
  fo.mla = options_.mla;
  const float* logits = model_.forward(&id, 1, cache_, ws_, fo);
  tokens_.push_back(id);
  return logits;
}

void Session::rewind(int n) {
  if (n < 0 || n > position())
    throw Error("cannot rewind to " + std::to_string(n) + " tokens: the session holds " + std::to_string(position()));
  cache_.truncate(n);
  tokens_.resize(size_t(n));
}

void Session::reset() {
  cache_.clear();
  tokens_.clear();
}

}  // namespace mtb
