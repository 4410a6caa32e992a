#include <charconv>
#include <filesystem>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/hf.h"
#include "mtb/io/model_file.h"
#include "mtb/chat/chat_template.h"
#include "mtb/train/run.h"

namespace mtb::app {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0 || v > INT32_MAX)
      throw Error("--ids: '" + item + "' is not a token id (expected non-negative integers separated by commas)");
    ids.push_back(int32_t(v));
    pos = end + 1;
  }
  return ids;
}

ModelConfig config_from_options(const std::string& preset_name, const std::string& config_path) {
  if (preset_name.empty() == config_path.empty()) throw Error("give exactly one of --preset NAME or --config FILE");
  return preset_name.empty() ? train::read_config_file(config_path) : preset(preset_name);  // HF or mtb form
}

Tokenizer model_tokenizer(const std::string& model_path) { return load_model_tokenizer(model_path); }

namespace {
bool is_gguf(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0; }
}  // namespace

std::optional<Tokenizer> try_model_tokenizer(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (is_gguf(model_path)) {
    try {
      return load_model_tokenizer(model_path);
    } catch (const Error&) {
      return std::nullopt;  // a GGUF file that holds token ids only
    }
  }
  const fs::path dir = fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  if (!fs::is_regular_file(dir / "tokenizer.json", ec)) return std::nullopt;
  return load_model_tokenizer(model_path);
}

chat::ChatTemplate model_chat_template(const std::string& path) {
  const ModelTextInfo info = load_model_text_info(path);
  if (info.chat_template.empty())
    throw Error(path + ": no chat template (tokenizer_config.json's chat_template, chat_template.jinja, or GGUF "
                       "tokenizer.chat_template)");
  return chat::ChatTemplate::from_source(info.chat_template, info.bos_token, info.eos_token, info.origin);
}

}  // namespace mtb::app
