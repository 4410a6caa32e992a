// Hugging Face model directories: config.json (model_type llama, mistral, qwen2, qwen3,
// deepseek_v2, deepseek_v3, gpt2) and safetensors weights, mapped to and from mtb's
// ModelConfig and canonical tensor names.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "mtb/core/tensor.h"
#include "mtb/model/config.h"

namespace mtb {

struct LoadedModel {
  ModelConfig config;
  TensorMap tensors;  // canonical names (see model/weights.h)
  std::string where;  // the path, for error messages
};

// config.json -> ModelConfig. Errors name `where` and the key.
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& where);
ModelConfig read_hf_config(const std::string& path);  // a config.json file
// ModelConfig -> config.json, as the config's family (its model_type) spells it.
// Throws mtb::Error if the family cannot express the config.
nlohmann::json config_to_hf_json(const ModelConfig& c, DType dtype);

LoadedModel load_hf_dir(const std::string& dir);

// Writes config.json and the weights (canonical names, renamed to the family's) to `dir`.
void save_hf_dir(const std::string& dir, const ModelConfig& c, const TensorMap& tensors, DType dtype,
                 size_t max_shard_bytes = 0);

}  // namespace mtb
