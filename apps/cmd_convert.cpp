// mtb convert -m MODEL -o OUT [--dtype f32|f16|bf16|q8_0]: to GGUF when OUT ends in .gguf
// (the layout and metadata llama.cpp expects), else to a Hugging Face directory.
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/gguf.h"

namespace mtb::app {

void add_convert(CLI::App& app) {
  struct Opts {
    std::string model, out, dtype;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "convert", "Convert a model to GGUF (OUT ends in .gguf) or to a Hugging Face directory");
  sub->add_option("-m,--model", o->model, "Model path (Hugging Face directory, GGUF file, llama2.c .bin)")->required();
  sub->add_option("-o,--output", o->out, "OUT.gguf, or a directory")->required();
  sub->add_option("--dtype", o->dtype, "Weight type (default: as the input; q8_0 for GGUF only)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  sub->callback([o] {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string summary = convert_model(o->model, o->out, o->dtype);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s in %.1f s\n", summary.c_str(), s);
  });
}

}  // namespace mtb::app

namespace mtb::app {

// mtb quantize -m MODEL -o OUT.gguf: Q8_0 weights (norms and rows not a multiple of 32 stay
// F32/F16), the format the kernels read in place.
void add_quantize(CLI::App& app) {
  struct Opts {
    std::string model, out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("quantize", "Write a model's weights as Q8_0 in a GGUF file");
  sub->add_option("-m,--model", o->model, "Model path")->required();
  sub->add_option("-o,--output", o->out, "OUT.gguf")->required();
  sub->callback([o] {
    if (!o->out.ends_with(".gguf")) throw Error("quantize: the output must be a .gguf file, got '" + o->out + "'");
    const auto t0 = std::chrono::steady_clock::now();
    const std::string summary = convert_model(o->model, o->out, "q8_0");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s in %.1f s\n", summary.c_str(), s);
  });
}

}  // namespace mtb::app
