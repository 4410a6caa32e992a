// mtb demo: the chapter's example model, built in memory: its parameter count, its KV
// cost, and one forward pass.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "mtb/model/model.h"
#include "mtb/tools/init.h"
#include "mtb/tools/report.h"

namespace mtb::app {

void add_demo(CLI::App& app) {
  auto preset_name = std::make_shared<std::string>("example-3m");
  CLI::App* sub = app.add_subcommand("demo", "Build the chapter's example model, report it, run a forward pass");
  sub->add_option("--preset", *preset_name, "Preset to build")->capture_default_str();
  sub->callback([preset_name] {
    ModelConfig c = preset(*preset_name);
    std::cout << describe_model(c, *preset_name);
    Model model(c, init_weights(c, 0, DType::F32), "init");
    std::vector<int32_t> ids(16);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % size_t(c.vocab));
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<float> logits = model.forward(ids);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double sum = 0;
    for (float v : logits) sum += std::fabs(v);
    std::printf("forward: %zu tokens -> logits [%zu, %d] in %.1f ms, mean |logit| %.4f, last row starts %.5f %.5f %.5f\n",
                ids.size(), ids.size(), c.vocab, ms, sum / double(logits.size()),
                logits[logits.size() - size_t(c.vocab)], logits[logits.size() - size_t(c.vocab) + 1],
                logits[logits.size() - size_t(c.vocab) + 2]);
  });
}

}  // namespace mtb::app
