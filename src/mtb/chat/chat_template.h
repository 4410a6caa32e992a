// A model's chat template: the Jinja template from tokenizer_config.json (or the
// chat_template.jinja beside it), rendered as Hugging Face's apply_chat_template(...,
// tokenize=False) renders it.
#pragma once
#include <string>

#include "mtb/chat/jinja.h"

namespace mtb::chat {

class ChatTemplate {
 public:
  // `path`: a model directory or its tokenizer_config.json. Takes `chat_template` (a string,
  // or the list of {name, template} where "default" is used); a chat_template.jinja in the
  // directory wins, as in transformers. bos_token/eos_token: a string or {"content": ...}.
  // Parses the template now: errors name the file (and the template line).
  static ChatTemplate load(const std::string& path);
  static ChatTemplate from_source(std::string source, std::string bos_token, std::string eos_token,
                                  std::string origin = "");

  // The prompt text. Template variables: messages, add_generation_prompt, tools and documents
  // (None unless `extra` has them), bos_token/eos_token (when non-empty), then every key of
  // `extra` (tools, enable_thinking, ...). Messages keep their key order (ordered JSON), which
  // tojson shows.
  std::string render(const Json& messages, bool add_generation_prompt, const Json& extra = Json::object()) const;

  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  const std::string& source() const { return source_; }
  // What strftime_now(format) returns (default: the local time); for reproducible tests.
  void set_strftime_now(std::function<std::string(const std::string&)> fn) { globals_.strftime_now = std::move(fn); }

 private:
  JinjaTemplate tmpl_;
  std::string source_, bos_, eos_;
  JinjaTemplate::Globals globals_;
};

}  // namespace mtb::chat
