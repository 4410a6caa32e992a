// mtb info MODEL | --preset NAME | --config FILE [--json]
#include <iostream>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/model_file.h"
#include "mtb/tools/report.h"

namespace mtb::app {

void add_info(CLI::App& app) {
  struct Opts {
    std::string model, preset, config;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("info", "Config, exact parameter count by component, KV-cache bytes per token");
  sub->add_option("model", o->model, "Model path (Hugging Face directory or llama2.c .bin)");
  sub->add_option("-m,--model", o->model, "Model path (same as the positional argument)");
  sub->add_option("--preset", o->preset, "A named preset instead of a model (see --list)");
  sub->add_option("--config", o->config, "A Hugging Face config.json instead of a model");
  sub->add_flag("--json", o->json, "Print JSON");
  auto list = std::make_shared<bool>(false);
  sub->add_flag("--list", *list, "List the presets");
  sub->callback([o, list] {
    if (*list) {
      for (const auto& n : preset_names()) std::cout << n << "\n";
      return;
    }
    const int given = !o->model.empty() + !o->preset.empty() + !o->config.empty();
    if (given != 1) throw Error("info: give exactly one of MODEL, --preset NAME or --config FILE");
    ModelConfig c;
    std::string name;
    if (!o->model.empty()) {
      LoadedModel m = load_model_file(o->model);
      Model checked(m.config, m.tensors, m.where);  // the weights must match the config
      c = m.config, name = o->model;
    } else {
      c = config_from_options(o->preset, o->config);
      name = o->preset.empty() ? o->config : o->preset;
    }
    if (o->json) std::cout << describe_model_json(c, name).dump(2) << "\n";
    else std::cout << describe_model(c, name);
  });
}

}  // namespace mtb::app
