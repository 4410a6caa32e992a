// Tensor: a typed, shaped view of bytes that live elsewhere (a mapped file or an owned
// buffer). TensorMap: named tensors plus whatever keeps their bytes alive.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mtb/core/dtype.h"

namespace mtb {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[256, 1000]"
int64_t shape_numel(const Shape& s);

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return dtype_bytes(dtype, numel()); }
  const float* f32() const { return static_cast<const float*>(data); }
  // Elements as float (a copy); for tests and small tensors.
  std::vector<float> to_vector() const;
};

struct NamedTensor {
  Tensor tensor;
  std::string source;  // the file it came from, for error messages
};

class TensorMap {
 public:
  void add(const std::string& name, const Tensor& t, const std::string& source);
  const NamedTensor* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  void erase(const std::string& name) { items_.erase(name); }
  const std::map<std::string, NamedTensor>& items() const { return items_; }

  // Keeps a mapping or buffer alive as long as this map (and its copies).
  void keep_alive(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }
  // Adds a tensor whose bytes this map owns.
  const Tensor& add_owned(const std::string& name, DType dtype, const Shape& shape,
                          std::vector<uint8_t> bytes, const std::string& source);
  const Tensor& add_owned_f32(const std::string& name, const Shape& shape,
                              std::vector<float> values, const std::string& source);

 private:
  std::map<std::string, NamedTensor> items_;
  std::vector<std::shared_ptr<const void>> owners_;
};

}  // namespace mtb
