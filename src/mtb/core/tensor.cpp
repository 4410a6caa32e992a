#include "mtb/core/tensor.h"

#include <cstring>

#include "mtb/core/error.h"

namespace mtb {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  to_f32(dtype, data, out.data(), out.size());
  return out;
}

void TensorMap::add(const std::string& name, const Tensor& t, const std::string& source) {
  if (items_.count(name)) throw Error(source + ": tensor '" + name + "' appears twice");
  items_[name] = NamedTensor{t, source};
}

const NamedTensor* TensorMap::find(const std::string& name) const {
  auto it = items_.find(name);
  return it == items_.end() ? nullptr : &it->second;
}

const Tensor& TensorMap::add_owned(const std::string& name, DType dtype, const Shape& shape,
                                   std::vector<uint8_t> bytes, const std::string& source) {
  auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Tensor t{dtype, shape, buf->data()};
  if (t.nbytes() != buf->size()) throw Error(source + ": tensor '" + name + "' has the wrong byte size");
  owners_.push_back(buf);
  add(name, t, source);
  return items_[name].tensor;
}

const Tensor& TensorMap::add_owned_f32(const std::string& name, const Shape& shape,
                                       std::vector<float> values, const std::string& source) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return add_owned(name, DType::F32, shape, std::move(bytes), source);
}

}  // namespace mtb
