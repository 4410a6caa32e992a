// mtb generate -m MODEL (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [sampling flags] [--print-ids]
// Streams the generated text (or ids) to stdout as it comes; closes with speeds and cache
// size on stderr. Text needs the model's tokenizer (tokenizer.json beside the weights).
#include <cstdio>
#include <optional>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/model_file.h"
#include "mtb/runtime/generate.h"
#include "mtb/tokenizer/tokenizer.h"
#include "mtb/tools/report.h"

namespace mtb::app {

void add_generate(CLI::App& app) {
  struct Opts {
    std::string model, prompt, prompt_ids, cache_type = "f32", mla = "auto", stop_ids;
    int max_tokens = 128, context = 0, top_k = 0;
    float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f;
    uint64_t seed = 0;
    bool print_ids = false, ignore_eos = false, no_special = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("generate", "Generate tokens with the KV cache");
  sub->add_option("-m,--model", o->model, "Model path")->required();
  CLI::Option* text = sub->add_option("-p,--prompt", o->prompt, "Prompt text (encoded with the model's tokenizer)");
  CLI::Option* ids = sub->add_option("--prompt-ids", o->prompt_ids, "Prompt token ids, comma separated");
  text->excludes(ids);
  ids->excludes(text);
  sub->add_flag("--no-special", o->no_special,
                "Encode the prompt without the tokenizer's BOS/EOS and read special-token strings as plain text");
  sub->add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate")->capture_default_str();
  sub->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  sub->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  sub->add_option("--top-p", o->top_p, "Keep the smallest set with this much probability, in (0, 1]")->capture_default_str();
  sub->add_option("--min-p", o->min_p, "Drop tokens below min-p x the best one's probability")->capture_default_str();
  sub->add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  sub->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  sub->add_option("--stop-ids", o->stop_ids, "Extra stop token ids, comma separated");
  sub->add_flag("--ignore-eos", o->ignore_eos, "Do not stop on the model's end-of-sequence ids");
  sub->add_option("--context", o->context, "KV cache length (default: prompt + n)");
  sub->add_option("--cache-type", o->cache_type, "KV cache element type")->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
  sub->add_option("--mla", o->mla, "MLA form: auto (absorbed), plain, absorbed")
      ->check(CLI::IsMember({"auto", "plain", "absorbed"}))->capture_default_str();
  sub->add_flag("--print-ids", o->print_ids, "Print the generated ids, space separated (the default without a tokenizer)");
  sub->callback([o] {
    SamplerOptions so;
    so.temperature = o->temperature, so.top_k = o->top_k, so.top_p = o->top_p, so.min_p = o->min_p;
    so.repetition_penalty = o->repeat_penalty, so.seed = o->seed;
    so.validate();
    if (o->max_tokens < 0) throw Error("-n must not be negative, got " + std::to_string(o->max_tokens));
    if (o->prompt.empty() && o->prompt_ids.empty()) throw Error("give a prompt: --prompt TEXT or --prompt-ids 1,2,3");
    Model model = open_model(o->model);
    // Text needs the tokenizer; ids print as text when there is one, else as ids.
    std::optional<Tokenizer> tok;
    if (!o->prompt.empty()) tok = model_tokenizer(o->model);
    else if (!o->print_ids) tok = try_model_tokenizer(o->model);
    const std::vector<int32_t> prompt =
        o->prompt.empty() ? parse_ids(o->prompt_ids) : tok->encode(o->prompt, !o->no_special, !o->no_special);
    if (prompt.empty()) throw Error("the prompt encodes to no tokens");
    const ModelConfig& c = model.config();
    const int64_t need = int64_t(prompt.size()) + o->max_tokens;
    if (int64_t(prompt.size()) > c.max_context)
      throw Error("prompt of " + std::to_string(prompt.size()) + " tokens is longer than the model's context of " +
                  std::to_string(c.max_context));
    if (need > c.max_context)
      throw Error("prompt (" + std::to_string(prompt.size()) + ") + -n (" + std::to_string(o->max_tokens) +
                  ") tokens exceed the model's context of " + std::to_string(c.max_context));
    EngineOptions eo;  // one request: the batching engine's path, so a batch's bits too
    eo.context = o->context > 0 ? o->context : int(std::max<int64_t>(need, 1));
    eo.max_seqs = 1, eo.batch_tokens = 256;
    eo.cache_type = o->cache_type == "bf16" ? DType::BF16 : o->cache_type == "f16" ? DType::F16 : DType::F32;
    eo.mla = o->mla == "plain" ? MlaForm::Plain : o->mla == "absorbed" ? MlaForm::Absorbed : MlaForm::Auto;
    Engine engine(model, eo);
    GenerateOptions go;
    go.max_tokens = o->max_tokens;
    if (!o->ignore_eos) go.stop_ids = c.eos_ids;
    if (!o->stop_ids.empty())
      for (int32_t id : parse_ids(o->stop_ids)) go.stop_ids.push_back(id);
    bool first = true;
    const bool as_text = tok && !o->print_ids;
    std::optional<StreamDecoder> stream;
    if (as_text) stream.emplace(*tok, /*skip_special_tokens=*/true);
    const GenerateStats st = generate(engine, prompt, so, go, [&](int32_t id) {
      if (as_text) std::fputs(stream->step(id).c_str(), stdout);
      else std::printf(first ? "%d" : " %d", id);
      std::fflush(stdout);
      first = false;
    });
    if (as_text) std::fputs(stream->finish().c_str(), stdout);
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prefill: %d tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s%s | KV cache: %s B (%s) for %d tokens, %s\n",
                 st.prompt_tokens, st.prefill_tokens_per_s(), st.generated_tokens, st.decode_tokens_per_s(),
                 st.stopped ? " (stopped at end-of-sequence)" : "", with_commas(engine.cache().bytes()).c_str(),
                 human_bytes(double(engine.cache().bytes())).c_str(), engine.context(), o->cache_type.c_str());
  });
}

}  // namespace mtb::app
