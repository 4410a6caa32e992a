// mtb tokenizer train [--corpus PATH] --vocab-size N -o OUT [--special TOKEN]... [--val-fraction F]
//   Learns a byte-level BPE on the corpus's training documents (the same deterministic split
//   `mtb train` uses, so validation text stays unseen) and writes a Hugging Face
//   tokenizer.json. OUT: a file path, or a directory to write tokenizer.json into.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/tokenizer/trainer.h"
#include "mtb/train/corpus.h"

namespace mtb::app {

void add_tokenizer(CLI::App& app) {
  struct Opts {
    std::string corpus = train::default_corpus_path(), out;
    int32_t vocab_size = 1000;
    std::vector<std::string> special{"<|endoftext|>"};
    double val_fraction = 0.05;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* tok = app.add_subcommand("tokenizer", "Tokenizer tools");
  tok->require_subcommand(1);
  CLI::App* tr = tok->add_subcommand("train", "Learn a byte-level BPE on a corpus and write a Hugging Face tokenizer.json");
  tr->add_option("--corpus", o->corpus, "A text file or a directory of text files (fortune files split at '%' lines)")
      ->capture_default_str();
  tr->add_option("--vocab-size", o->vocab_size, "Tokens in all: 256 bytes + learned merges + special tokens")
      ->capture_default_str();
  tr->add_option("-o,--out", o->out, "The tokenizer.json to write (or a directory to write it into)")->required();
  tr->add_option("--special", o->special, "Special tokens, ids after the learned ones (repeat for several)")
      ->capture_default_str();
  tr->add_option("--val-fraction", o->val_fraction, "Documents held out for validation (not learned from)")
      ->capture_default_str();
  tr->callback([o] {
    namespace fs = std::filesystem;
    std::string out = o->out;
    std::error_code ec;
    if (fs::is_directory(out, ec) || out.ends_with("/")) out = (fs::path(out) / "tokenizer.json").string();
    const train::Corpus corpus = train::load_corpus(o->corpus, o->val_fraction);
    std::fprintf(stderr, "corpus %s: %lld files, %zu training documents (%.2f MB in all)\n", corpus.source.c_str(),
                 static_cast<long long>(corpus.files), corpus.train.size(), double(corpus.bytes) / 1e6);
    tok::BpeTrainOptions opt;
    opt.vocab_size = o->vocab_size;
    opt.special_tokens = o->special;
    opt.progress = [](int64_t done, int64_t wanted) {
      std::fprintf(stderr, "\rlearning merges: %lld/%lld (%3.0f%%)", static_cast<long long>(done),
                   static_cast<long long>(wanted), wanted ? 100.0 * double(done) / double(wanted) : 100.0);
      std::fflush(stderr);
    };
    const tok::TrainedBpe model = tok::train_bpe(corpus.train, opt);
    std::fprintf(stderr, "\n");
    if (!model.complete)
      std::fprintf(stderr, "stopped early: no pair left to merge after %zu merges; vocab size %d instead of %d\n",
                   model.merges.size(), model.vocab_size(), o->vocab_size);
    const std::string json = tok::bpe_tokenizer_json(model);
    const fs::path parent = fs::path(out).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    write_file_atomic(out, json.data(), json.size());
    std::fprintf(stderr, "wrote %s: %d tokens (%zu merges, %zu special), from %lld pre-tokens (%lld distinct)\n",
                 out.c_str(), model.vocab_size(), model.merges.size(), model.special_tokens.size(),
                 static_cast<long long>(model.pre_tokens), static_cast<long long>(model.words));
  });
}

}  // namespace mtb::app
