// The KV cache: per layer and token, what attention needs of past tokens. Standard
// attention keeps K and V of the n_kv heads (2·n_kv·dh elements); MLA keeps only the
// normalized latent c_kv and the RoPE'd shared key k_R (kv_lora_rank + qk_rope_head_dim).
// Sized once for `capacity` tokens; elements F32, BF16 or F16.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/core/dtype.h"
#include "mtb/model/config.h"

namespace mtb {

class KVCache {
 public:
  KVCache(const ModelConfig& c, int capacity, DType type);

  int capacity() const { return capacity_; }
  int size() const { return size_; }  // tokens held
  DType type() const { return type_; }
  bool is_mla() const { return mla_; }
  void clear() { size_ = 0; }
  void advance(int n) { size_ += n; }
  // Drops tokens past `n` (to re-run a suffix).
  void truncate(int n) { size_ = n < size_ ? n : size_; }
  // Bytes allocated: layers · capacity · elements per token per layer · element size.
  int64_t bytes() const { return int64_t(data_.size()); }

  // Standard attention: K and V rows [capacity][n_kv · dh] of one layer.
  void* k(int layer) { return base(layer); }
  void* v(int layer) { return base(layer) + size_t(capacity_) * size_t(row_) * esize_; }
  int64_t kv_row() const { return row_; }  // elements per token in k(layer) and in v(layer)
  // MLA: rows [capacity][kv_lora_rank | qk_rope_head_dim] of one layer.
  void* latent(int layer) { return base(layer); }
  int64_t latent_row() const { return row_; }

 private:
  uint8_t* base(int layer) { return data_.data() + size_t(layer) * layer_bytes_; }

  int capacity_ = 0, size_ = 0;
  DType type_ = DType::F32;
  bool mla_ = false;
  int64_t row_ = 0;
  size_t esize_ = 4, layer_bytes_ = 0;
  std::vector<uint8_t> data_;
};

}  // namespace mtb
