// mtb train (--preset NAME | --config FILE) --tokenizer tokenizer.json [--corpus PATH] -o RUNDIR
//           [--steps N --batch B --seq-len T --lr ... ] [--resume] [--stop-at STEP] [--quiet]
// Trains a model on a corpus into a run directory (see src/mtb/train/run.h): a Hugging Face-
// style model directory at every checkpoint, resumable exactly. Ctrl-C stops after the
// current step with a checkpoint.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/core/parallel.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tools/report.h"
#include "mtb/train/corpus.h"
#include "mtb/train/run.h"

namespace mtb::app {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C stops at once (the last checkpoint stays valid)
}

}  // namespace

void add_train(CLI::App& app) {
  struct Opts {
    std::string preset, config, tokenizer, corpus, out;
    train::TrainOptions t;
    int threads = 0;
    int64_t stop_at = 0;
    bool resume = false, quiet = false, vocab_from_tokenizer = false;
    std::map<std::string, CLI::Option*> given;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("train", "Train a model on a text corpus into a run directory (resumable)");
  sub->add_option("--preset", o->preset, "A named preset (e.g. example-3m)");
  sub->add_option("--config", o->config, "A config.json (Hugging Face's, or mtb's form: see docs/training.md)");
  sub->add_option("--tokenizer", o->tokenizer, "tokenizer.json (default on --resume: the run's copy)");
  sub->add_option("--corpus", o->corpus, "Text file or directory (default: " + train::default_corpus_path() + ")");
  sub->add_option("-o,--out", o->out, "Run directory (new or empty; with --resume an existing run)")->required();
  sub->add_flag("--vocab-from-tokenizer", o->vocab_from_tokenizer, "Set the config's vocab to the tokenizer's size");
  auto opt = [&](const std::string& name, auto& v, const std::string& help) {
    o->given[name] = sub->add_option(name, v, help)->capture_default_str();
  };
  opt("--steps", o->t.steps, "Optimizer steps in all (the LR schedule spans them)");
  opt("--batch", o->t.batch, "Sequences per micro-batch");
  opt("--seq-len", o->t.seq_len, "Tokens per sequence");
  opt("--grad-accum", o->t.grad_accum, "Micro-batches per step");
  opt("--lr", o->t.lr, "Peak learning rate");
  opt("--min-lr", o->t.min_lr, "Learning rate at the end of the cosine decay");
  opt("--warmup", o->t.warmup, "Linear warmup steps");
  opt("--weight-decay", o->t.weight_decay, "AdamW weight decay (matrices only)");
  opt("--clip", o->t.clip, "Max global gradient norm (0 = off)");
  opt("--eval-every", o->t.eval_every, "Validation every N steps (0 = start and end only)");
  opt("--eval-batches", o->t.eval_batches, "Validation micro-batches (batch x seq-len tokens each)");
  opt("--save-every", o->t.save_every, "Checkpoint every N steps (0 = at each validation)");
  opt("--seed", o->t.seed, "Seed of the initial weights and the batch order");
  opt("--val-fraction", o->t.val_fraction, "Documents held out for validation");
  sub->add_option("--threads", o->threads, "Threads (default: MTB_THREADS, else all cores)");
  sub->add_option("--stop-at", o->stop_at, "Checkpoint and stop after this step (continue with --resume)");
  sub->add_flag("--resume", o->resume, "Continue the run in -o exactly where its checkpoint left it");
  sub->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
  sub->callback([o] {
    namespace fs = std::filesystem;
    if (o->threads < 0) throw Error("--threads must not be negative");
    if (o->threads > 0) set_num_threads(o->threads);
    train::TrainOptions topt = o->t;
    ModelConfig config;
    bool have_config = !o->preset.empty() || !o->config.empty();
    if (!o->preset.empty() && !o->config.empty()) throw Error("give one of --preset NAME or --config FILE, not both");
    if (o->resume) {
      const train::RunState st = train::read_run_state(o->out);
      // The checkpoint's options, except those given on this command line.
      train::TrainOptions merged = st.options;
      const nlohmann::json given_json = topt.to_json();
      nlohmann::json mj = merged.to_json();
      static const std::map<std::string, std::string> key = {
          {"--steps", "steps"}, {"--batch", "batch"}, {"--seq-len", "seq_len"}, {"--grad-accum", "grad_accum"},
          {"--lr", "lr"}, {"--min-lr", "min_lr"}, {"--warmup", "warmup"}, {"--weight-decay", "weight_decay"},
          {"--clip", "clip"}, {"--eval-every", "eval_every"}, {"--eval-batches", "eval_batches"},
          {"--save-every", "save_every"}, {"--seed", "seed"}, {"--val-fraction", "val_fraction"}};
      for (const auto& [flag, k] : key)
        if (o->given.at(flag)->count() > 0) mj[k] = given_json[k];
      topt = train::TrainOptions::from_json(mj, o->out);
      if (!have_config) config = st.config;
      if (o->tokenizer.empty()) o->tokenizer = (fs::path(o->out) / "tokenizer.json").string();
      if (o->corpus.empty()) o->corpus = st.options.corpus;
    } else if (!have_config) {
      throw Error("give --preset NAME or --config FILE (or --resume to continue a run)");
    }
    if (o->tokenizer.empty()) throw Error("give --tokenizer PATH/tokenizer.json (e.g. from `mtb tokenizer train`)");
    const Tokenizer tok = Tokenizer::load(o->tokenizer);
    const std::optional<int32_t> sep = tok.token_to_id("<|endoftext|>");
    if (have_config) {
      config = !o->preset.empty() ? preset(o->preset) : train::read_config_file(o->config);
      const std::string name = !o->preset.empty() ? "preset " + o->preset : o->config;
      if (o->vocab_from_tokenizer) config.vocab = tok.vocab_size();
      else if (config.vocab != tok.vocab_size())
        throw Error("the config's vocab (" + std::to_string(config.vocab) + ", " + name +
                    ") differs from the tokenizer's vocab size (" + std::to_string(tok.vocab_size()) + ", " +
                    tok.path() + "); pass --vocab-from-tokenizer to use the tokenizer's");
      if (config.eos_ids.empty() && sep) config.eos_ids = {*sep};
    }
    if (o->corpus.empty()) o->corpus = train::default_corpus_path();
    topt.corpus = o->corpus;
    topt.validate();

    const train::Corpus corpus = train::load_corpus(o->corpus, topt.val_fraction);
    train::TokenData data;
    data.train = train::tokenize_documents(tok, corpus.train, sep.value_or(-1));
    data.val = train::tokenize_documents(tok, corpus.val, sep.value_or(-1));
    const int64_t params = count_params(config).total();
    const int64_t step_tokens = int64_t(topt.batch) * topt.seq_len * topt.grad_accum;
    if (!o->quiet)
      std::fprintf(stderr,
                   "corpus %s: %zu + %zu documents, %s + %s tokens (train + val)\n"
                   "model: %s parameters, vocab %d | %lld steps x %s tokens = %s tokens (%.2f epochs) | %d threads\n",
                   o->corpus.c_str(), corpus.train.size(), corpus.val.size(), with_commas(int64_t(data.train.size())).c_str(),
                   with_commas(int64_t(data.val.size())).c_str(), with_commas(params).c_str(), config.vocab,
                   (long long)topt.steps, with_commas(step_tokens).c_str(), with_commas(step_tokens * topt.steps).c_str(),
                   double(step_tokens * topt.steps) / double(std::max<size_t>(1, data.train.size())), num_threads());

    train::RunSettings rs;
    rs.dir = o->out;
    rs.resume = o->resume;
    rs.stop_at = o->stop_at;
    rs.tokenizer_file = o->resume ? "" : tok.path();
    rs.quiet = o->quiet;
    g_interrupted = 0;
    std::signal(SIGINT, on_sigint);
    rs.hooks.stop_requested = [] { return g_interrupted != 0; };
    train::RunResult r;
    try {
      r = train::run_training(config, data, topt, rs);
    } catch (...) {
      std::signal(SIGINT, SIG_DFL);
      throw;
    }
    std::signal(SIGINT, SIG_DFL);
    if (g_interrupted && !r.finished)
      throw Error("interrupted at step " + std::to_string(r.step) + ": checkpoint saved; continue with mtb train --resume -o " + o->out);
    const double entropy = train::unigram_entropy(data.train, config.vocab);
    std::printf("%s: step %lld/%lld, %s tokens, %.1f s, %.0f tokens/s\n", o->out.c_str(), (long long)r.step,
                (long long)topt.steps, with_commas(r.tokens).c_str(), r.elapsed_s, r.tokens_per_s);
    if (r.val_loss > 0)
      std::printf("val loss %.4f nats/token (%s the unigram entropy of the training tokens, %.4f nats/token)\n", r.val_loss,
                  r.val_loss < entropy ? "below" : "NOT below", entropy);
  });
}

}  // namespace mtb::app
