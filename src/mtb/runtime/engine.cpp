#include "mtb/runtime/engine.h"

#include <algorithm>
#include <string>

#include "mtb/core/error.h"

namespace mtb {

struct Engine::Sequence {
  int64_t id = 0;
  Request req;
  Sampler sampler;
  std::vector<int32_t> tokens;    // prompt, then generated tokens
  int n_prompt = 0, generated = 0;
  int computed = 0;               // positions whose K/V are in the cache
  std::vector<int32_t> blocks;    // block table
  std::vector<uint64_t> hashes;   // chain hash of each full block, as far as known
  std::vector<uint64_t> plan;     // chain hashes of the full blocks of its tokens at admission
  int named = 0;                  // leading blocks named in (or taken from) the prefix cache
  int reused = 0;
  int64_t start = -1;             // admission order; -1 while waiting
  bool scheduled = false;         // in this step's batch
  bool done = false;

  Sequence(Request r, int vocab) : req(std::move(r)), sampler(req.sampling, vocab) {}
};

namespace {

int pool_blocks(const EngineOptions& o, int context) {
  const int64_t tokens = o.kv_tokens > 0 ? o.kv_tokens : context;
  const int64_t blocks = (tokens + o.block_size - 1) / o.block_size;
  if (blocks * o.block_size > INT32_MAX) throw Error("--kv-budget of " + std::to_string(tokens) + " tokens is too large");
  return int(blocks);
}

}  // namespace

void EngineOptions::validate() const {
  if (kv_tokens < 0) throw Error("--kv-budget must not be negative, got " + std::to_string(kv_tokens));
  if (block_size <= 0 || block_size > 4096) throw Error("KV block size must be in [1, 4096], got " + std::to_string(block_size));
  if (max_seqs <= 0) throw Error("--max-seqs must be positive, got " + std::to_string(max_seqs));
  if (batch_tokens <= 0) throw Error("--batch-tokens must be positive, got " + std::to_string(batch_tokens));
  if (context < 0) throw Error("context must not be negative, got " + std::to_string(context));
  if (cache_type == DType::Q8_0) throw Error("the KV cache holds F32, BF16 or F16, not Q8_0");
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "none";
}

Engine::Engine(const Model& model, EngineOptions options)
    : model_(model),
      options_((options.validate(), options)),
      context_(model.config().context_for(options_.context)),
      pool_(pool_blocks(options_, context_), options_.block_size),
      cache_(model.config(), pool_.n_blocks() * options_.block_size, options_.cache_type),
      ws_(model.make_workspace(options_.batch_tokens, context_, options_.mla, false,
                               std::min(options_.max_seqs, options_.batch_tokens))) {
  running_.reserve(size_t(options_.max_seqs));
  finished_.reserve(size_t(options_.max_seqs) + 1);
  segs_.reserve(size_t(options_.max_seqs));
  seg_seq_.reserve(size_t(options_.max_seqs));
  order_.reserve(size_t(options_.max_seqs));
}

Engine::~Engine() = default;

int64_t Engine::submit(Request r) {
  const ModelConfig& c = model_.config();
  if (r.prompt.empty()) throw Error("empty prompt: a request needs at least one token");
  if (r.max_tokens < 0) throw Error("max_tokens must not be negative, got " + std::to_string(r.max_tokens));
  if (int64_t(r.prompt.size()) > context_)
    throw Error("prompt of " + std::to_string(r.prompt.size()) + " tokens is longer than the context of " +
                std::to_string(context_));
  const int64_t pool_tokens = int64_t(pool_.n_blocks()) * pool_.block_size();
  if (int64_t(r.prompt.size()) > pool_tokens)
    throw Error("prompt of " + std::to_string(r.prompt.size()) + " tokens is longer than the KV pool of " +
                std::to_string(pool_tokens) + " tokens");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= c.vocab)
      throw Error("token id " + std::to_string(r.prompt[i]) + " at prompt position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
  for (int32_t id : r.stop_ids)
    if (id < 0 || id >= c.vocab) throw Error("stop id " + std::to_string(id) + " is outside the vocabulary");
  r.sampling.validate();
  auto owned = std::make_unique<Sequence>(std::move(r), c.vocab);
  Sequence* s = owned.get();
  s->id = next_id_++;
  s->n_prompt = int(s->req.prompt.size());
  const int most = int(std::min<int64_t>(context_, int64_t(s->n_prompt) + s->req.max_tokens));
  s->tokens.reserve(size_t(most) + 1);
  s->tokens = s->req.prompt;
  const size_t max_blocks = size_t((most + options_.block_size - 1) / options_.block_size) + 1;
  s->blocks.reserve(max_blocks), s->hashes.reserve(max_blocks), s->plan.reserve(max_blocks);
  const int64_t id = s->id;
  all_.push_back(std::move(owned));
  waiting_.push_back(s);
  if (s->req.max_tokens == 0) finish(*s, FinishReason::Length, true);
  if (!stepping_) free_finished();
  return id;
}

void Engine::free_finished() {
  for (Sequence* f : finished_)
    all_.erase(std::find_if(all_.begin(), all_.end(), [&](const auto& p) { return p.get() == f; }));
  finished_.clear();
}

void Engine::release_blocks(Sequence& s) {
  for (int32_t b : s.blocks) pool_.release(b);
  s.blocks.clear();
  s.hashes.clear();
  s.computed = 0, s.named = 0;
}

void Engine::finish(Sequence& s, FinishReason r, bool emit) {
  if (s.done) return;
  s.done = true;
  release_blocks(s);
  auto rit = std::find(running_.begin(), running_.end(), &s);
  if (rit != running_.end()) running_.erase(rit);
  auto wit = std::find(waiting_.begin(), waiting_.end(), &s);
  if (wit != waiting_.end()) waiting_.erase(wit);
  finished_.push_back(&s);
  if (emit && s.req.on_token) {
    TokenEvent e;
    e.request = s.id, e.token = -1, e.index = s.generated, e.finish = r, e.reused = s.reused;
    s.req.on_token(e);
  }
}

void Engine::cancel(int64_t id) {
  for (auto& s : all_)
    if (s->id == id && !s->done) {
      finish(*s, FinishReason::Cancelled, true);
      break;
    }
  if (!stepping_) free_finished();  // (inside a step, its end frees it)
}

bool Engine::admit(Sequence& s) {
  s.start = next_start_++;
  s.reused = 0;
  if (!options_.prefix_cache) return true;
  // The chain hashes of its whole blocks; those found in the cache are taken, leaving at
  // least the last token to compute.
  const int bs = options_.block_size;
  const int n_tokens = int(s.tokens.size());
  s.plan.clear();
  uint64_t parent = 0;
  for (int b = 0; (b + 1) * bs <= n_tokens; ++b) {
    parent = BlockPool::chain_hash(parent, s.tokens.data() + size_t(b) * bs, bs);
    s.plan.push_back(parent);
  }
  for (int b = 0; (b + 1) * bs <= n_tokens - 1; ++b) {
    const int32_t* t = s.tokens.data() + size_t(b) * bs;
    const int blk = pool_.lookup(s.plan[size_t(b)], b ? s.plan[size_t(b - 1)] : 0, t);
    if (blk < 0) break;
    s.blocks.push_back(blk);
    s.hashes.push_back(s.plan[size_t(b)]);
  }
  s.named = int(s.blocks.size());
  // The next block is one a running sequence is computing now (a shared system prompt
  // submitted twice): wait for it rather than compute it again.
  const int b = s.named;
  if ((b + 1) * bs <= n_tokens - 1)
    for (const Sequence* r : running_)
      if (r->named <= b && int(r->plan.size()) > b && r->plan[size_t(b)] == s.plan[size_t(b)]) {
        release_blocks(s);
        s.start = -1;
        return false;
      }
  s.computed = s.named * bs;
  s.reused = s.computed;
  stats_.reused_tokens += s.reused;
  return true;
}

Engine::Sequence* Engine::victim(const Sequence* current) {
  // The most recently started running sequence not yet in this step's batch; else `current`.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (!(*it)->scheduled && *it != current) return *it;
  return nullptr;
}

void Engine::preempt(Sequence& s) {
  release_blocks(s);
  s.start = -1;
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  waiting_.push_front(&s);
  ++stats_.preemptions;
}

bool Engine::ensure_blocks(Sequence& s, int upto, const Sequence* keep) {
  const int bs = options_.block_size;
  while (int(s.blocks.size()) * bs < upto) {
    int b = pool_.allocate();
    while (b < 0) {
      Sequence* v = keep ? victim(keep) : nullptr;
      if (!v) return false;
      preempt(*v);
      b = pool_.allocate();
    }
    s.blocks.push_back(b);
  }
  return true;
}

void Engine::name_full_blocks(Sequence& s) {
  if (!options_.prefix_cache) return;
  const int bs = options_.block_size;
  while ((s.named + 1) * bs <= s.computed) {
    const int b = s.named;
    const uint64_t parent = b ? s.hashes[size_t(b - 1)] : 0;
    const int32_t* t = s.tokens.data() + size_t(b) * bs;
    const uint64_t h = b < int(s.plan.size()) ? s.plan[size_t(b)] : BlockPool::chain_hash(parent, t, bs);
    pool_.name(s.blocks[size_t(b)], h, parent, t);
    s.hashes.push_back(h);
    ++s.named;
  }
}

bool Engine::step() {
  // Whatever happens below (a callback may throw), the step ends clean: no batch, finished
  // sequences freed.
  struct Guard {
    Engine& e;
    ~Guard() {
      e.segs_.clear(), e.seg_seq_.clear();
      e.stepping_ = false;
      e.free_finished();
    }
  } guard{*this};
  stepping_ = true;
  segs_.clear(), seg_seq_.clear();
  int budget = options_.batch_tokens;
  for (Sequence* s : running_) s->scheduled = false;
  auto schedule = [&](Sequence& s, int n) {
    BatchSegment g;
    g.ids = s.tokens.data() + s.computed;
    g.n = n, g.pos0 = s.computed;
    g.block_size = options_.block_size;
    g.logits = s.computed + n == int(s.tokens.size()) ? BatchSegment::Logits::Last : BatchSegment::Logits::None;
    segs_.push_back(g);  // the block table pointer is set once every table is final
    seg_seq_.push_back(&s);
    s.scheduled = true;
    budget -= n;
  };
  // 1. The next token of every decoding sequence, then 2. prompt chunks of running ones, in
  // start order. A sequence short of blocks preempts the newest unscheduled one; with none
  // left it is itself preempted (or, alone in the pool, ends: it has used all the room).
  for (int pass = 0; pass < 2; ++pass) {
    order_.assign(running_.begin(), running_.end());
    for (Sequence* sp : order_) {
      Sequence& s = *sp;
      if (budget <= 0) break;
      if (s.start < 0 || s.done) continue;  // preempted meanwhile
      const int pending = int(s.tokens.size()) - s.computed;
      if (s.scheduled || pending <= 0 || (pass == 0) != (pending == 1)) continue;
      const int n = std::min(pending, budget);
      if (!ensure_blocks(s, s.computed + n, &s)) {
        if (running_.size() == 1) finish(s, FinishReason::Length, true);  // it holds the whole pool
        else preempt(s);
        continue;
      }
      schedule(s, n);
    }
  }
  // 3. Admit waiting requests in order while there is room: budget, a running slot, and
  // blocks for the first chunk (never by preempting: when blocks run short nothing new
  // starts). One whose next prefix block a running sequence is computing waits a step.
  for (size_t w = 0; w < waiting_.size() && budget > 0 && int(running_.size()) < options_.max_seqs;) {
    Sequence& s = *waiting_[w];
    if (!admit(s)) {
      ++w;
      continue;
    }
    const int n = std::min(int(s.tokens.size()) - s.computed, budget);
    if (!ensure_blocks(s, s.computed + n, nullptr)) {
      stats_.reused_tokens -= s.reused;
      release_blocks(s);
      s.start = -1, s.reused = 0;
      break;
    }
    waiting_.erase(waiting_.begin() + int64_t(w));
    running_.push_back(&s);
    schedule(s, n);
  }
  stats_.peak_running = std::max(stats_.peak_running, int(running_.size()));
  stats_.peak_blocks = std::max(stats_.peak_blocks, pool_.referenced());
  if (segs_.empty()) return !idle();
  for (size_t i = 0; i < segs_.size(); ++i) segs_[i].block_table = seg_seq_[i]->blocks.data();
  const float* logits = model_.forward_batch(segs_.data(), int(segs_.size()), cache_, ws_, options_.mla);
  ++stats_.steps;
  const int vocab = model_.config().vocab;
  int row = 0;
  for (size_t i = 0; i < segs_.size(); ++i) {
    Sequence& s = *seg_seq_[i];
    const BatchSegment& g = segs_[i];
    const bool last = g.logits == BatchSegment::Logits::Last;
    const float* l = last ? logits + size_t(row++) * vocab : nullptr;
    if (s.done) continue;  // cancelled by an earlier callback of this step
    if (s.generated > 0 && g.n == 1 && last) ++stats_.decoded_tokens;
    else stats_.prefilled_tokens += g.n;
    s.computed += g.n;
    name_full_blocks(s);
    if (!last) continue;
    const int32_t tok = s.sampler.sample(l, s.tokens);
    ++s.generated;
    ++stats_.generated_tokens;
    FinishReason r = FinishReason::None;
    if (std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), tok) != s.req.stop_ids.end()) r = FinishReason::Stop;
    else if (s.generated >= s.req.max_tokens || int(s.tokens.size()) + 1 > context_) r = FinishReason::Length;
    // The token joins the sequence before the callback hears of it, so the sequence is whole
    // whatever the callback does (cancel it, or throw: then it is cancelled).
    if (r != FinishReason::None) finish(s, r, false);
    else s.tokens.push_back(tok);
    if (s.req.on_token) {
      TokenEvent e;
      e.request = s.id, e.token = tok, e.index = s.generated - 1, e.logits = l, e.finish = r, e.reused = s.reused;
      try {
        s.req.on_token(e);
      } catch (...) {
        finish(s, FinishReason::Cancelled, false);
        throw;
      }
    }
  }
  return true;
}

void Engine::run() {
  while (step()) {
  }
}

}  // namespace mtb
