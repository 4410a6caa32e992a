// A training run: a config, token streams and options -> a run directory that is at every
// checkpoint a Hugging Face-style model directory (config.json, model.safetensors, the
// copied tokenizer.json) plus what an exact resume needs (optimizer.safetensors: AdamW's
// moments; trainer_state.json: step, sampler RNG state, options, config, data hash) and
// metrics.jsonl (one JSON object per train step and per validation).
//
// Batches: each sequence is a window of seq_len + 1 tokens at a position drawn from the
// train stream by a splitmix64 generator seeded with --seed; its state is checkpointed, so
// a resumed run draws the same batches as one that never stopped. Validation: the first
// eval_batches x batch windows of the validation stream, laid end to end, always the same.
// Results depend on neither the thread count nor the interruptions: N steps + resume + N
// steps give bit-identical parameters and losses to 2N steps straight.
//
// Checkpoints are written atomically: into RUNDIR/.checkpoint.tmp, renamed to
// RUNDIR/.checkpoint.ready (the commit point), then moved file by file into RUNDIR. A kill
// before the commit leaves the old checkpoint intact; a kill after it is finished by the next
// open (recover_run_dir).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mtb/model/config.h"

namespace mtb::train {

struct TrainOptions {
  int64_t steps = 1000;       // optimizer steps in all (the schedule spans them)
  int batch = 8;              // sequences per micro-batch
  int seq_len = 256;
  int grad_accum = 1;         // micro-batches per step
  double lr = 1e-3, min_lr = 1e-4;
  int warmup = 100;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;          // max global gradient norm; <= 0: off
  int64_t eval_every = 100;   // steps; 0: only at the start and the end
  int eval_batches = 8;       // validation micro-batches (batch x seq_len tokens each)
  int64_t save_every = 0;     // steps; 0: at each validation
  uint64_t seed = 0;          // initial weights and batch sampling
  float init_std = 0.02f;
  std::string corpus;         // where the data came from (recorded; a resume reads it again)
  double val_fraction = 0.05; // documents held out for validation

  nlohmann::json to_json() const;
  static TrainOptions from_json(const nlohmann::json& j, const std::string& where);
  // Throws mtb::Error naming the option for a value out of range.
  void validate() const;
};

// The token streams of a corpus: documents joined with a separator, train and validation.
struct TokenData {
  std::vector<int32_t> train, val;
};

// 64-bit FNV-1a of the token streams and of a config (its canonical JSON): what a resume
// checks against the checkpoint.
uint64_t data_hash(const TokenData& d);
uint64_t config_hash(const ModelConfig& c);

// Every ModelConfig field as JSON (mtb's own form, for configs that no Hugging Face family
// can express, e.g. the ladder's GPT-2 block with RMSNorm), and back. A file is read as
// Hugging Face config.json when it has "model_type", else as this form.
nlohmann::json config_to_json(const ModelConfig& c);
ModelConfig config_from_json(const nlohmann::json& j, const std::string& where);
ModelConfig read_config_file(const std::string& path);

struct RunHooks {
  // Called with each step's mean training loss before it is checked (tests inject NaN).
  std::function<void(int64_t step, double& loss)> on_loss;
  // Called between the phases of a checkpoint write ("written", "committed", "moved:<file>");
  // throwing simulates a kill there.
  std::function<void(const std::string& phase)> on_checkpoint;
  // Polled after each step: true stops the run there with a checkpoint (Ctrl-C, tests).
  std::function<bool()> stop_requested;
};

struct RunSettings {
  std::string dir;                  // the run directory
  bool resume = false;              // continue the run in dir (its options, config and data)
  int64_t stop_at = 0;              // > 0: checkpoint and return after this step (the schedule still spans steps)
  std::string tokenizer_file;       // copied into a new run dir as tokenizer.json ("" = none)
  bool quiet = false;               // no progress on stderr
  FILE* progress = stderr;
  RunHooks hooks;
};

struct RunResult {
  int64_t step = 0;                 // optimizer steps done
  int64_t tokens = 0;               // training tokens seen
  double train_loss = 0;            // the last step's
  double val_loss = 0;              // the last validation's (nats per token)
  double tokens_per_s = 0;          // over this invocation's steps
  double elapsed_s = 0;             // over the whole run, resumes included
  bool finished = false;            // step == options.steps
};

// Starts a run in settings.dir (which must not exist or be empty), or, with
// settings.resume, continues it; `options` is used for a new run, and on resume only its
// steps (the schedule then spans the new total) and eval_every / save_every may differ
// from the checkpoint's (the caller passes the checkpoint's options otherwise; see
// read_run_options). `config` must match the checkpoint's on resume, `data` its token
// streams. Errors: one line naming the directory, the option or the step.
RunResult run_training(const ModelConfig& config, const TokenData& data, const TrainOptions& options,
                       const RunSettings& settings);

// A run directory's options and config (from trainer_state.json), after recover_run_dir.
struct RunState {
  TrainOptions options;
  ModelConfig config;
  int64_t step = 0;
};
RunState read_run_state(const std::string& dir);

// Finishes an interrupted checkpoint write (see above) or drops an incomplete one.
void recover_run_dir(const std::string& dir);

}  // namespace mtb::train
