// The subcommands of `mtb`, one file each. Each registers its options and a callback.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "mtb/model/config.h"

namespace mtb::app {

void add_info(CLI::App& app);
void add_init(CLI::App& app);
void add_logits(CLI::App& app);
void add_tokenize(CLI::App& app);  // `tokenize` and `detokenize`
void add_generate(CLI::App& app);
void add_kv(CLI::App& app);
void add_bench(CLI::App& app);
void add_demo(CLI::App& app);
void add_convert(CLI::App& app);
void add_quantize(CLI::App& app);

// Shared helpers.
std::vector<int32_t> parse_ids(const std::string& text);  // "1,2,3"; throws mtb::Error
// A config from --preset NAME or --config FILE (exactly one must be given).
ModelConfig config_from_options(const std::string& preset_name, const std::string& config_path);

}  // namespace mtb::app
