// mtb chat -m MODEL: an interactive, multi-turn conversation through the model's own chat
// template, on the batching engine. Each turn renders the whole conversation and submits it
// as a new request: the engine's prefix cache hands it the KV blocks of the earlier turns'
// tokens (every whole block the new rendering shares with them) and only the rest is
// prefilled; the reply streams until the template's end-of-turn token. Lines starting with
// '/' are commands: /reset starts over, /exit (or end of input) quits.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "mtb/chat/chat_template.h"
#include "mtb/core/error.h"
#include "mtb/io/model_file.h"
#include "mtb/runtime/generate.h"
#include "mtb/tools/report.h"

namespace mtb::app {
namespace {

// Tokens that end an assistant turn: the config's end-of-sequence ids, the template's EOS
// token, and the end-of-turn markers of the common template families where the vocabulary
// has them.
std::vector<int32_t> end_of_turn_ids(const ModelConfig& c, const Tokenizer& tok, const chat::ChatTemplate& tmpl) {
  std::set<int32_t> ids(c.eos_ids.begin(), c.eos_ids.end());
  std::vector<std::string> names = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>"};
  if (!tmpl.eos_token().empty()) names.push_back(tmpl.eos_token());
  for (const std::string& n : names)
    if (auto id = tok.token_to_id(n)) ids.insert(*id);
  return {ids.begin(), ids.end()};
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

void add_chat(CLI::App& app) {
  struct Opts {
    std::string model, system, template_path, cache_type = "f32", mla = "auto";
    int max_tokens = 512, context = 4096, top_k = 40;
    float temperature = 0.7f, top_p = 0.95f, min_p = 0.0f, repeat_penalty = 1.0f;
    uint64_t seed = 0;
    bool no_think = false, verbose = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("chat", "Chat with a model through its chat template (/reset, /exit)");
  sub->add_option("-m,--model", o->model, "Model path (with tokenizer.json and tokenizer_config.json)")->required();
  sub->add_option("--system", o->system, "System message");
  sub->add_option("--template", o->template_path, "tokenizer_config.json (or its directory) whose chat_template to use");
  sub->add_option("-n,--max-tokens", o->max_tokens, "Most tokens per reply")->capture_default_str();
  sub->add_option("--context", o->context, "KV cache length (capped at the model's)")->capture_default_str();
  sub->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  sub->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  sub->add_option("--top-p", o->top_p, "Keep the smallest set with this much probability")->capture_default_str();
  sub->add_option("--min-p", o->min_p, "Drop tokens below min-p x the best one's probability")->capture_default_str();
  sub->add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  sub->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  sub->add_flag("--no-think", o->no_think, "Pass enable_thinking=false to the template (Qwen3)");
  sub->add_option("--cache-type", o->cache_type, "KV cache element type")->check(CLI::IsMember({"f32", "bf16", "f16"}))->capture_default_str();
  sub->add_option("--mla", o->mla, "MLA form: auto, plain, absorbed")->check(CLI::IsMember({"auto", "plain", "absorbed"}))->capture_default_str();
  sub->add_flag("-v,--verbose", o->verbose, "After each reply, print what was reused, prefilled and generated");
  sub->callback([o] {
    SamplerOptions so;
    so.temperature = o->temperature, so.top_k = o->top_k, so.top_p = o->top_p, so.min_p = o->min_p;
    so.repetition_penalty = o->repeat_penalty, so.seed = o->seed;
    so.validate();
    if (o->max_tokens <= 0) throw Error("-n must be positive, got " + std::to_string(o->max_tokens));
    if (o->context <= 0) throw Error("--context must be positive, got " + std::to_string(o->context));
    Model model = open_model(o->model);
    const ModelConfig& c = model.config();
    const Tokenizer tok = model_tokenizer(o->model);
    const chat::ChatTemplate tmpl = model_chat_template(o->template_path.empty() ? o->model : o->template_path);
    if (tok.vocab_size() > c.vocab)
      throw Error(tok.path() + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                  " tokens but the model's vocabulary is " + std::to_string(c.vocab));

    EngineOptions eo;
    eo.context = c.max_context > 0 ? std::min(o->context, c.max_context) : o->context;
    eo.max_seqs = 1, eo.batch_tokens = 256;
    eo.cache_type = o->cache_type == "bf16" ? DType::BF16 : o->cache_type == "f16" ? DType::F16 : DType::F32;
    eo.mla = o->mla == "plain" ? MlaForm::Plain : o->mla == "absorbed" ? MlaForm::Absorbed : MlaForm::Auto;
    Engine engine(model, eo);
    const std::vector<int32_t> stop = end_of_turn_ids(c, tok, tmpl);
    chat::Json extra = chat::Json::object();
    if (o->no_think) extra["enable_thinking"] = false;

    const bool tty = isatty(STDIN_FILENO);
    chat::Json messages = chat::Json::array();
    auto start_over = [&] {
      messages = chat::Json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    };
    start_over();
    std::fprintf(stderr, "mtb chat: %s, context %d tokens (KV cache %s). /reset starts over, /exit quits.\n",
                 o->model.c_str(), engine.context(), human_bytes(double(engine.cache().bytes())).c_str());
    int turn = 0;
    std::string line;
    while (true) {
      if (tty) std::fputs("> ", stdout), std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
      line = trim(line);
      if (line.empty()) continue;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        start_over();
        turn = 0;
        std::fprintf(stderr, "(conversation reset)\n");
        continue;
      }
      if (line[0] == '/') {
        std::fprintf(stderr, "unknown command %s (commands: /reset, /exit)\n", line.c_str());
        continue;
      }
      messages.push_back({{"role", "user"}, {"content", line}});
      const std::vector<int32_t> ids = tok.encode(tmpl.render(messages, true, extra), false, true);
      const int room = engine.context() - int(ids.size());
      if (room <= 0) {
        messages.erase(messages.end() - 1);
        std::fprintf(stderr, "the conversation (%zu tokens) no longer fits the context of %d tokens: /reset to start over\n",
                     ids.size(), engine.context());
        continue;
      }
      GenerateOptions go;
      go.max_tokens = std::min(o->max_tokens, room);
      go.stop_ids = stop;
      std::vector<int32_t> reply;
      StreamDecoder stream(tok, /*skip_special_tokens=*/true);
      SamplerOptions turn_sampling = so;
      turn_sampling.seed = so.seed + uint64_t(turn);  // each turn its own draws, reproducible
      const GenerateStats st = generate(engine, ids, turn_sampling, go, [&](int32_t id) {
                                          if (std::find(stop.begin(), stop.end(), id) != stop.end()) return;
                                          reply.push_back(id);
                                          std::fputs(stream.step(id).c_str(), stdout);
                                          std::fflush(stdout);
                                        });
      std::fputs(stream.finish().c_str(), stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
      messages.push_back({{"role", "assistant"}, {"content", tok.decode(reply, /*skip_special_tokens=*/true)}});
      ++turn;
      if (o->verbose)
        std::fprintf(stderr, "[turn %d: %zu tokens rendered, %zu reused from the cache, %d prefilled at %.1f tok/s, %d generated at %.1f tok/s%s]\n",
                     turn, ids.size(), size_t(st.reused_tokens), st.prompt_tokens - st.reused_tokens,
                     st.prefill_tokens_per_s(), st.generated_tokens,
                     st.decode_tokens_per_s(), st.stopped ? ", end of turn" : "");
    }
  });
}

}  // namespace mtb::app
