// Human-readable reports shared by the commands: numbers with separators, bytes with
// binary prefixes, and a model's config / parameter / KV-cost summary.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "mtb/model/config.h"

namespace mtb {

std::string with_commas(int64_t n);  // 3283456 -> "3,283,456"
std::string human_bytes(double bytes);  // 2621440 -> "2.5 MiB", 70272 -> "68.6 KiB"

// The text `mtb info` prints: config, parameters by component, KV-cache bytes per token.
std::string describe_model(const ModelConfig& c, const std::string& name);
nlohmann::json describe_model_json(const ModelConfig& c, const std::string& name);

}  // namespace mtb
