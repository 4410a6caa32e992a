// A Jinja2 subset for Hugging Face chat templates, rendered the way transformers does
// (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls; tojson as
// json.dumps with ensure_ascii=False). The template is parsed once; render() takes the
// top-level variables as JSON. Anything outside the subset is refused with an mtb::Error
// naming the feature and the template line, at parse time where Jinja would also refuse then.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace mtb::chat {

// JSON that keeps object keys in insertion order, as Python dicts do (tojson and items()
// output them in that order).
using Json = nlohmann::ordered_json;

struct TemplateNode;  // the parsed body (jinja.cpp)

class JinjaTemplate {
 public:
  // Parses `source`; `origin` (a file name, or empty) prefixes every error message:
  // "chat template ORIGIN line N: ...".
  static JinjaTemplate parse(const std::string& source, const std::string& origin);

  struct Globals {
    // strftime_now(format): the current local time by default; tests inject a fixed one.
    std::function<std::string(const std::string& format)> strftime_now;
  };
  // Renders with `variables` (an object) as the top-level names. raise_exception(msg) in
  // the template throws mtb::Error "chat template: raise_exception: msg".
  std::string render(const Json& variables, const Globals& globals = {}) const;

 private:
  std::shared_ptr<const TemplateNode> root_;
  std::string origin_;
};

}  // namespace mtb::chat
