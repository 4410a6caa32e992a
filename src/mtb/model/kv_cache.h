// The KV cache: per layer and token, what attention needs of past tokens. Standard
// attention keeps K and V of the n_kv heads (2·n_kv·dh elements); MLA keeps only the
// normalized latent c_kv and the RoPE'd shared key k_R (kv_lora_rank + qk_rope_head_dim).
// Sized once for `capacity` tokens; elements F32, BF16 or F16. Rows whose size is a multiple
// of 512 bytes are padded by a cache line: at a stride of 4 KiB every key of a head would fall
// into the same few L1 sets, and attention over them ran about 30% slower.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/core/dtype.h"
#include "mtb/model/config.h"

namespace mtb {

class KVCache {
 public:
  KVCache(const ModelConfig& c, int capacity, DType type);
  // Bytes one token row takes over all layers (K and V, or MLA's row), padding included.
  static int64_t bytes_per_token(const ModelConfig& c, DType type);

  int capacity() const { return capacity_; }
  int size() const { return size_; }  // tokens held
  DType type() const { return type_; }
  bool is_mla() const { return mla_; }
  void clear() { size_ = 0; }
  void advance(int n) { size_ += n; }
  // Drops tokens past `n` (to re-run a suffix).
  void truncate(int n) { size_ = n < size_ ? n : size_; }
  // Bytes allocated: layers · capacity · row_stride() · element size (x2 for K and V).
  int64_t bytes() const { return int64_t(data_.size()); }

  // Standard attention: K and V rows [capacity][n_kv · dh] of one layer, row_stride() apart.
  void* k(int layer) { return base(layer); }
  void* v(int layer) { return base(layer) + size_t(capacity_) * size_t(stride_) * esize_; }
  // MLA: rows [capacity][kv_lora_rank | qk_rope_head_dim] of one layer, row_stride() apart.
  void* latent(int layer) { return base(layer); }
  // Elements from one token's row to the next (the row, plus any padding).
  int64_t row_stride() const { return stride_; }

 private:
  uint8_t* base(int layer) { return data_.data() + size_t(layer) * layer_bytes_; }

  int capacity_ = 0, size_ = 0;
  DType type_ = DType::F32;
  bool mla_ = false;
  int64_t stride_ = 0;
  size_t esize_ = 4, layer_bytes_ = 0;
  std::vector<uint8_t> data_;
};

}  // namespace mtb
