// The subcommands of `mtb`, one file each. Each registers its options and a callback.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mtb/model/config.h"
#include "mtb/tokenizer/tokenizer.h"

namespace mtb::chat {
class ChatTemplate;
}

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
void add_chat(CLI::App& app);
void add_train(CLI::App& app);
void add_tokenizer(CLI::App& app);  // `tokenizer train`
void add_plot(CLI::App& app);

// Shared helpers.
std::vector<int32_t> parse_ids(const std::string& text);  // "1,2,3"; throws mtb::Error
// A config from --preset NAME or --config FILE (exactly one must be given).
ModelConfig config_from_options(const std::string& preset_name, const std::string& config_path);
// The tokenizer that goes with a model path (throws mtb::Error naming the path when there is
// none), or nothing.
Tokenizer model_tokenizer(const std::string& model_path);
std::optional<Tokenizer> try_model_tokenizer(const std::string& model_path);
// The chat template of a model directory, its tokenizer_config.json, or a file inside it.
chat::ChatTemplate model_chat_template(const std::string& path);

}  // namespace mtb::app
