#include "mtb/model/kv_cache.h"

#include "mtb/core/error.h"

namespace mtb {

KVCache::KVCache(const ModelConfig& c, int capacity, DType type)
    : capacity_(capacity), type_(type), mla_(c.is_mla()) {
  if (capacity <= 0) throw Error("KV cache capacity must be positive, got " + std::to_string(capacity));
  esize_ = dtype_size(type);
  const int64_t per_token = c.kv_elements_per_token_per_layer();  // K+V, or latent + RoPE key
  const int64_t row = mla_ ? per_token : per_token / 2;  // elements per row
  stride_ = row * int64_t(esize_) % 512 == 0 ? row + 64 / int64_t(esize_) : row;
  layer_bytes_ = size_t(capacity) * size_t(stride_) * esize_ * (mla_ ? 1 : 2);
  data_.assign(layer_bytes_ * size_t(c.n_layers), 0);
}

}  // namespace mtb
