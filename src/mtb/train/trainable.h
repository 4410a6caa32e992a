// Trainable: a config plus every parameter and its gradient in fp32, each in one slab,
// laid out in the order and under the canonical names of model/weights.h
// (expected_tensors(config)), so a trained model saves with io/hf.h's save_hf_dir and runs
// in mtb::Model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mtb/core/tensor.h"
#include "mtb/model/config.h"
#include "mtb/model/weights.h"

namespace mtb::train {

struct Param {
  TensorSpec spec;     // canonical name, shape, role (Matrix or Vector)
  size_t offset = 0;   // into the slabs, in floats
  int64_t numel = 0;
};

class Trainable {
 public:
  // Every parameter zero. Throws mtb::Error for an invalid config or one training does not
  // support (mixture-of-experts layers, YaRN).
  explicit Trainable(ModelConfig config);
  // Values from a checked tensor map (F32, F16, BF16, Q8_0 widened to fp32); a redundant
  // lm_head.weight of a tied model is ignored. Errors name `where`.
  static Trainable from_tensors(ModelConfig config, const TensorMap& tensors, const std::string& where);

  const ModelConfig& config() const { return config_; }
  const std::vector<Param>& params() const { return params_; }
  const Param& param(const std::string& name) const;  // throws mtb::Error when absent
  const Param* find(const std::string& name) const;
  int64_t size() const { return int64_t(values_.size()); }

  std::vector<float>& values() { return values_; }
  const std::vector<float>& values() const { return values_; }
  std::vector<float>& grads() { return grads_; }
  const std::vector<float>& grads() const { return grads_; }
  float* value(const std::string& name) { return values_.data() + param(name).offset; }
  const float* value(const std::string& name) const { return values_.data() + param(name).offset; }
  float* grad(const std::string& name) { return grads_.data() + param(name).offset; }
  const float* grad(const std::string& name) const { return grads_.data() + param(name).offset; }

  void zero_grads();
  // The values as named F32 tensors (copies), ready for save_hf_dir or mtb::Model.
  TensorMap to_tensors() const;

 private:
  ModelConfig config_;
  std::vector<Param> params_;
  std::vector<float> values_, grads_;
};

}  // namespace mtb::train
