// mtb logits -m MODEL --ids 1,2,3 -o FILE: raw little-endian float32 [n_tokens][vocab].
#include <cstdio>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/io/model_file.h"

namespace mtb::app {

void add_logits(CLI::App& app) {
  struct Opts {
    std::string model, ids, out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("logits", "Write the logits at every position as raw float32 [n_tokens][vocab]");
  sub->add_option("-m,--model", o->model, "Model path")->required();
  sub->add_option("--ids", o->ids, "Token ids, comma separated")->required();
  sub->add_option("-o,--output", o->out, "Output file")->required();
  sub->callback([o] {
    const std::vector<int32_t> ids = parse_ids(o->ids);
    Model model = open_model(o->model);
    const std::vector<float> logits = model.forward(ids);
    write_file_atomic(o->out, logits.data(), logits.size() * sizeof(float));
    std::printf("wrote %zu x %d logits to %s\n", ids.size(), model.config().vocab, o->out.c_str());
  });
}

}  // namespace mtb::app
