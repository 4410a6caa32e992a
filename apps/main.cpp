// mtb: the modern Transformer block engine. Errors end as one line on stderr and a
// non-zero exit: 1 for bad input or failed work, 2 for bad command-line arguments.
#include <cstdio>
#include <string>

#include "commands.h"
#include "mtb/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"mtb: the modern Transformer block engine (RMSNorm, SwiGLU, RoPE, GQA/MLA, QK-norm)"};
  app.require_subcommand(1);
  mtb::app::add_demo(app);
  mtb::app::add_info(app);
  mtb::app::add_init(app);
  mtb::app::add_logits(app);
  mtb::app::add_tokenize(app);
  mtb::app::add_generate(app);
  mtb::app::add_chat(app);
  mtb::app::add_kv(app);
  mtb::app::add_bench(app);
  mtb::app::add_convert(app);
  mtb::app::add_quantize(app);
  mtb::app::add_train(app);
  mtb::app::add_tokenizer(app);
  mtb::app::add_plot(app);
  std::string known;
  bool is_command = false;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    is_command = is_command || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_command) {
    std::fprintf(stderr, "mtb: error: unknown command '%s' (commands: %s)\n", argv[1], known.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mtb: error: %s (see mtb --help)\n", e.what());
    return 2;
  } catch (const mtb::Error& e) {
    std::fprintf(stderr, "mtb: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mtb: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
