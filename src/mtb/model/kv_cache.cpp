#include "mtb/model/kv_cache.h"

#include "mtb/core/error.h"

namespace mtb {

namespace {

// Elements from one row to the next: the row, plus a cache line where it is a multiple of 512 bytes.
int64_t row_stride_of(const ModelConfig& c, size_t esize) {
  const int64_t per_token = c.kv_elements_per_token_per_layer();  // K+V, or latent + RoPE key
  const int64_t row = c.is_mla() ? per_token : per_token / 2;     // elements per row
  return row * int64_t(esize) % 512 == 0 ? row + 64 / int64_t(esize) : row;
}

}  // namespace

int64_t KVCache::bytes_per_token(const ModelConfig& c, DType type) {
  return row_stride_of(c, dtype_size(type)) * int64_t(dtype_size(type)) * (c.is_mla() ? 1 : 2) * c.n_layers;
}

KVCache::KVCache(const ModelConfig& c, int capacity, DType type)
    : capacity_(capacity), type_(type), mla_(c.is_mla()) {
  if (capacity <= 0) throw Error("KV cache capacity must be positive, got " + std::to_string(capacity));
  esize_ = dtype_size(type);
  stride_ = row_stride_of(c, esize_);
  layer_bytes_ = size_t(capacity) * size_t(stride_) * esize_ * (mla_ ? 1 : 2);
  data_.assign(layer_bytes_ * size_t(c.n_layers), 0);
}

}  // namespace mtb
