#include "mtb/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mtb/core/error.h"

namespace mtb::chat {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("chat template: cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tokenizer_config.json is read with sorted keys (it can hold thousands of added tokens, which
// insertion-ordered JSON would insert slowly); only three keys are used.
using ConfigJson = nlohmann::json;

// A special token as tokenizer_config.json writes it: a string, {"content": ...} or null.
std::string token_text(const ConfigJson& config, const char* key, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  throw Error(path + ": '" + key + "' is neither a string nor an object with a string 'content'");
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& path) {
  namespace fs = std::filesystem;
  const bool dir = fs::is_directory(path);
  const std::string config_path = dir ? (fs::path(path) / "tokenizer_config.json").string() : path;
  if (!fs::exists(config_path)) throw Error("chat template: " + config_path + " does not exist");
  ConfigJson config;
  try {
    config = ConfigJson::parse(read_file(config_path));
  } catch (const ConfigJson::exception& e) {
    throw Error(config_path + ": invalid JSON: " + e.what());
  }
  if (!config.is_object()) throw Error(config_path + ": not a JSON object");
  const std::string bos = token_text(config, "bos_token", config_path), eos = token_text(config, "eos_token", config_path);

  const std::string jinja_path = (fs::path(config_path).parent_path() / "chat_template.jinja").string();
  if (fs::exists(jinja_path)) return from_source(read_file(jinja_path), bos, eos, jinja_path);

  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    throw Error(config_path + ": no 'chat_template' (this model has no chat template)");
  if (it->is_string()) return from_source(it->get<std::string>(), bos, eos, config_path);
  if (it->is_array()) {
    std::string names;
    for (const ConfigJson& t : *it) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template") || !t["name"].is_string() ||
          !t["template"].is_string())
        throw Error(config_path + ": 'chat_template' list entries must be {\"name\": ..., \"template\": ...}");
      if (t["name"] == "default")
        return from_source(t["template"].get<std::string>(), bos, eos, config_path + " (template 'default')");
      names += (names.empty() ? "" : ", ") + t["name"].get<std::string>();
    }
    throw Error(config_path + ": 'chat_template' has no template named 'default' (it has: " + names + ")");
  }
  throw Error(config_path + ": 'chat_template' is neither a string nor a list of named templates");
}

ChatTemplate ChatTemplate::from_source(std::string source, std::string bos_token, std::string eos_token,
                                       std::string origin) {
  ChatTemplate t;
  t.tmpl_ = JinjaTemplate::parse(source, origin);
  t.source_ = std::move(source);
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  return t;
}

std::string ChatTemplate::render(const Json& messages, bool add_generation_prompt, const Json& extra) const {
  if (!extra.is_object()) throw Error("chat template: the extra template variables must be a JSON object");
  Json vars = Json::object();
  vars["messages"] = messages;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  if (!bos_.empty()) vars["bos_token"] = bos_;
  if (!eos_.empty()) vars["eos_token"] = eos_;
  for (const auto& [k, v] : extra.items()) vars[k] = v;
  return tmpl_.render(vars, globals_);
}

}  // namespace mtb::chat
