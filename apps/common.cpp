#include <charconv>

#include "commands.h"
#include "mtb/core/error.h"
#include "mtb/io/hf.h"

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
  return preset_name.empty() ? read_hf_config(config_path) : preset(preset_name);
}

}  // namespace mtb::app
