// Engine: many sequences at once over one paged KV cache (continuous batching).
//
// The cache is one pool of blocks (BlockPool), sized once; a sequence's cache is a block
// table, and a single sequence may use the whole pool. Each step() builds one batch: the
// next token of every running sequence, then chunks of prompts still to prefill (chunked
// prefill), within a token budget per step and a cap on running sequences, and runs it as one
// Model::forward_batch. Requests join and leave at any step. A new request takes the full
// blocks of its prompt that are already cached (the prefix cache) and prefills the rest; at
// least its last prompt token is always computed; one whose next prefix block a running
// sequence is computing waits for it instead of computing it too. When blocks run short nothing new is
// admitted, and if still short the most recently started sequence is preempted: its blocks
// are released and it is recomputed later from its tokens.
//
// Batch invariance: a request's logits, and so its tokens, are the same bits whatever else is
// in its batches, whatever the token budget and however its prompt was cut (see
// kernels/matmul.h and kernels/attention.h), on a given machine and thread count.
//
// Not thread-safe: one thread submits, cancels and steps (a server runs it in its own loop).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "mtb/model/kv_cache.h"
#include "mtb/model/model.h"
#include "mtb/runtime/block_pool.h"
#include "mtb/runtime/sampler.h"

namespace mtb {

struct EngineOptions {
  int64_t kv_tokens = 0;        // pool size in token rows; 0: the context (one full sequence)
  int block_size = 16;          // token rows per block
  int max_seqs = 16;            // sequences running at once; more wait
  int batch_tokens = 512;       // tokens per step (decodes + prompt chunks)
  int context = 0;              // tokens one sequence may hold; 0: the model's max_context
  DType cache_type = DType::F32;
  MlaForm mla = MlaForm::Auto;
  bool prefix_cache = true;     // share cached full blocks of prompts
  // Throws mtb::Error naming the option for an impossible value.
  void validate() const;
};

enum class FinishReason { None, Stop, Length, Cancelled };
const char* finish_reason_name(FinishReason r);

// One event of a request: a generated token (with the logits it was drawn from), or, with
// token -1, the end of a request that produced no further token (cancelled, or out of room).
struct TokenEvent {
  int64_t request = 0;
  int32_t token = -1;
  int index = 0;                   // 0 for the first generated token
  const float* logits = nullptr;   // [vocab], valid during the callback
  int reused = 0;                  // prompt tokens taken from the prefix cache (last admission)
  FinishReason finish = FinishReason::None;  // set on the request's last event
};

struct Request {
  std::vector<int32_t> prompt;
  SamplerOptions sampling;
  int max_tokens = 128;             // generated tokens at most (the context may end it sooner)
  std::vector<int32_t> stop_ids;    // generation ends after producing one of these
  std::function<void(const TokenEvent&)> on_token;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prefilled_tokens = 0;  // prompt (and recomputed) tokens run through the model
  int64_t reused_tokens = 0;     // prompt tokens whose K/V came from the prefix cache
  int64_t decoded_tokens = 0;    // tokens run to extend a generation
  int64_t generated_tokens = 0;  // tokens sampled
  int64_t preemptions = 0;
  int peak_running = 0;
  int peak_blocks = 0;           // most blocks referenced at once
};

class Engine {
 public:
  Engine(const Model& model, EngineOptions options);
  ~Engine();

  // Queues a request and returns its id. Throws mtb::Error, queueing nothing, for an empty
  // prompt, one longer than the context or the pool (it could never run), a token id outside
  // the vocabulary, a negative max_tokens or bad sampling values.
  int64_t submit(Request request);
  // Ends a request now (waiting or running): its blocks are released at once and its last
  // event says Cancelled. Unknown or finished ids are ignored. Callbacks may call it.
  void cancel(int64_t id);
  // Runs one batch; false when there was nothing to run. An exception from a callback
  // cancels that request (blocks released) and propagates; the engine stays usable.
  bool step();
  // Steps until every request has finished.
  void run();

  bool idle() const { return running_.empty() && waiting_.empty(); }
  int running() const { return int(running_.size()); }
  int waiting() const { return int(waiting_.size()); }
  const EngineStats& stats() const { return stats_; }
  const BlockPool& pool() const { return pool_; }
  const KVCache& cache() const { return cache_; }
  const EngineOptions& options() const { return options_; }
  int context() const { return context_; }

 private:
  struct Sequence;
  bool admit(Sequence& s);  // prefix lookup at admission; false: wait for a block being computed
  bool ensure_blocks(Sequence& s, int upto, const Sequence* keep);  // blocks for positions < upto
  Sequence* victim(const Sequence* current);
  void preempt(Sequence& s);
  void release_blocks(Sequence& s);
  void finish(Sequence& s, FinishReason r, bool emit);
  void name_full_blocks(Sequence& s);
  void free_finished();                      // erases this step's finished sequences

  const Model& model_;
  EngineOptions options_;
  int context_ = 0;
  BlockPool pool_;
  KVCache cache_;
  Workspace ws_;
  std::vector<std::unique_ptr<Sequence>> all_;   // every request not yet finished
  std::vector<Sequence*> running_;               // in start order
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> finished_;              // this step's, removed at its end
  std::vector<BatchSegment> segs_;
  std::vector<Sequence*> seg_seq_;
  std::vector<Sequence*> order_;                 // running_ at the start of a pass
  int64_t next_id_ = 1, next_start_ = 0;
  bool stepping_ = false;  // inside step(): finished sequences are freed at its end
  EngineStats stats_;
};

}  // namespace mtb
