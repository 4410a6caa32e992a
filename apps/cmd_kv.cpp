// mtb kv (--preset NAME | --config FILE | -m MODEL) [--context N] [--dtype bf16]
//        [--budget 24GiB] [--weights bf16] [--groups 8] [--json]
#include <iostream>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/model_file.h"
#include "mtb/tools/kv_planner.h"

namespace mtb::app {

void add_kv(CLI::App& app) {
  struct Opts {
    std::string preset, config, model, dtype = "bf16", budget, weights;
    int64_t context = 0;
    int groups = 8;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("kv", "KV-cache planner: bytes per token, at a context, longest context in a budget");
  sub->add_option("--preset", o->preset, "A named preset");
  sub->add_option("--config", o->config, "A Hugging Face config.json");
  sub->add_option("-m,--model", o->model, "A model path (only its config is read)");
  sub->add_option("--context", o->context, "Context length in tokens (default: the model's maximum)");
  sub->add_option("--dtype", o->dtype, "Cache element type: fp32, bf16, fp16, fp8, int8")->capture_default_str();
  sub->add_option("--budget", o->budget, "Memory budget, e.g. 24GiB, 80GB");
  sub->add_option("--weights", o->weights, "Subtract the weights, stored at this type (bf16, fp32, ...), from the budget");
  sub->add_option("--groups", o->groups, "KV heads of the GQA alternative")->capture_default_str();
  sub->add_flag("--json", o->json, "Print JSON");
  sub->callback([o] {
    const int given = !o->preset.empty() + !o->config.empty() + !o->model.empty();
    if (given != 1) throw Error("kv: give exactly one of --preset NAME, --config FILE or -m MODEL");
    ModelConfig c;
    if (!o->model.empty()) c = load_model_file(o->model).config;
    else c = config_from_options(o->preset, o->config);
    if (o->context < 0) throw Error("--context must not be negative");
    if (o->groups < 1) throw Error("--groups must be at least 1");
    KvPlanRequest r;
    r.bytes_per_element = parse_element_bytes(o->dtype);
    r.context = o->context;
    if (!o->budget.empty()) r.budget_bytes = parse_bytes(o->budget);
    if (!o->weights.empty()) {
      if (o->budget.empty()) throw Error("--weights needs --budget");
      r.weight_bytes_per_element = parse_element_bytes(o->weights);
    }
    r.gqa_groups = o->groups;
    const std::string name = !o->preset.empty() ? o->preset : !o->config.empty() ? o->config : o->model;
    if (o->json) std::cout << kv_plan_json(c, name, r).dump(2) << "\n";
    else std::cout << kv_plan_text(c, name, r);
  });
}

}  // namespace mtb::app
