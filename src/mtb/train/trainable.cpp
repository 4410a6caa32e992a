#include "mtb/train/trainable.h"

#include <algorithm>

#include "mtb/core/error.h"

namespace mtb::train {

Trainable::Trainable(ModelConfig config) : config_(std::move(config)) {
  config_.validate("training config");
  if (config_.rope_scaling.type == RopeScaling::Type::Yarn)
    throw Error("training config: YaRN rope_scaling is not supported");
  for (int l = 0; l < config_.n_layers; ++l)
    if (config_.layer_is_moe(l))
      throw Error("training config: layer " + std::to_string(l) + " is a mixture-of-experts layer; training runs dense layers only");
  size_t offset = 0;
  for (TensorSpec& s : expected_tensors(config_)) {
    Param p;
    p.numel = shape_numel(s.shape);
    p.spec = std::move(s);
    p.offset = offset;
    offset += size_t(p.numel);
    params_.push_back(std::move(p));
  }
  values_.assign(offset, 0.0f);
  grads_.assign(offset, 0.0f);
}

Trainable Trainable::from_tensors(ModelConfig config, const TensorMap& tensors, const std::string& where) {
  check_tensors(config, tensors, where);
  Trainable t(std::move(config));
  for (const Param& p : t.params_) {
    const Tensor& src = tensors.find(p.spec.name)->tensor;
    to_f32(src.dtype, src.data, t.values_.data() + p.offset, size_t(p.numel));
  }
  return t;
}

const Param* Trainable::find(const std::string& name) const {
  for (const Param& p : params_)
    if (p.spec.name == name) return &p;
  return nullptr;
}

const Param& Trainable::param(const std::string& name) const {
  const Param* p = find(name);
  if (!p) throw Error("no parameter '" + name + "' in this model");
  return *p;
}

void Trainable::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

TensorMap Trainable::to_tensors() const {
  TensorMap m;
  for (const Param& p : params_)
    m.add_owned_f32(p.spec.name, p.spec.shape,
                    std::vector<float>(values_.begin() + long(p.offset), values_.begin() + long(p.offset + p.numel)),
                    "trainable");
  return m;
}

}  // namespace mtb::train
