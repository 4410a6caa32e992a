#include "mtb/runtime/block_pool.h"

#include <algorithm>
#include <string>

#include "mtb/core/error.h"

namespace mtb {

BlockPool::BlockPool(int n_blocks, int block_size) : n_blocks_(n_blocks), block_size_(block_size) {
  if (n_blocks <= 0) throw Error("the KV pool needs at least one block, got " + std::to_string(n_blocks));
  if (block_size <= 0) throw Error("KV block size must be positive, got " + std::to_string(block_size));
  const size_t n = size_t(n_blocks);
  refs_.assign(n, 0), named_.assign(n, 0), hash_.assign(n, 0), parent_.assign(n, 0);
  tokens_.assign(n * size_t(block_size), 0);
  prev_.assign(n, -1), next_.assign(n, -1);
  free_.reserve(n);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
  uint64_t cap = 16;
  while (cap < 2 * uint64_t(n_blocks)) cap *= 2;
  slots_.assign(size_t(cap), -1);
  mask_ = cap - 1;
}

uint64_t BlockPool::chain_hash(uint64_t parent, const int32_t* tokens, int n) {
  // splitmix64 steps over the parent hash and each token.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent ^ 0x6d74622d6b76ull);
  for (int i = 0; i < n; ++i) h = mix(h ^ uint64_t(uint32_t(tokens[i])));
  return h;
}

int BlockPool::find_slot(uint64_t hash) const {
  for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
    const int b = slots_[size_t(i)];
    if (b < 0) return -1;
    if (hash_[size_t(b)] == hash) return int(i);
  }
}

void BlockPool::lru_remove(int b) {
  const int p = prev_[size_t(b)], n = next_[size_t(b)];
  (p >= 0 ? next_[size_t(p)] : lru_head_) = n;
  (n >= 0 ? prev_[size_t(n)] : lru_tail_) = p;
  prev_[size_t(b)] = next_[size_t(b)] = -1;
}

void BlockPool::lru_push_back(int b) {
  prev_[size_t(b)] = lru_tail_, next_[size_t(b)] = -1;
  (lru_tail_ >= 0 ? next_[size_t(lru_tail_)] : lru_head_) = b;
  lru_tail_ = b;
}

void BlockPool::unname(int b) {
  const int i = find_slot(hash_[size_t(b)]);  // names are unique (see name), so this is b's slot
  // Backward-shift deletion: move later entries of the probe run into the hole.
  uint64_t hole = uint64_t(i);
  for (uint64_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
    const int e = slots_[size_t(j)];
    if (e < 0) break;
    const uint64_t home = hash_[size_t(e)] & mask_;
    // e may move into the hole if its home is not in (hole, j] (cyclically).
    const bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!between) {
      slots_[size_t(hole)] = e;
      hole = j;
    }
  }
  slots_[size_t(hole)] = -1;
  named_[size_t(b)] = 0;
}

int BlockPool::allocate() {
  int b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {  // evict the least recently used cached block
    b = lru_head_;
    lru_remove(b);
    unname(b);
    --cached_;
    ++evictions_;
  } else {
    return -1;
  }
  refs_[size_t(b)] = 1;
  ++referenced_;
  return b;
}

void BlockPool::retain(int b) {
  if (refs_[size_t(b)]++ == 0) {  // a cached block comes back into use
    lru_remove(b);
    --cached_;
    ++referenced_;
  }
}

void BlockPool::release(int b) {
  if (refs_[size_t(b)] <= 0) throw Error("KV block " + std::to_string(b) + " released more often than held");
  if (--refs_[size_t(b)] > 0) return;
  --referenced_;
  if (named_[size_t(b)]) {
    lru_push_back(b);
    ++cached_;
  } else {
    free_.push_back(b);
  }
}

int BlockPool::lookup(uint64_t hash, uint64_t parent, const int32_t* tokens) {
  const int i = find_slot(hash);
  if (i < 0) return -1;
  const int b = slots_[size_t(i)];
  if (parent_[size_t(b)] != parent ||
      !std::equal(tokens, tokens + block_size_, tokens_.begin() + int64_t(b) * block_size_))
    return -1;
  retain(b);
  return b;
}

void BlockPool::name(int b, uint64_t hash, uint64_t parent, const int32_t* tokens) {
  if (named_[size_t(b)] || find_slot(hash) >= 0) return;
  uint64_t i = hash & mask_;
  while (slots_[size_t(i)] >= 0) i = (i + 1) & mask_;
  slots_[size_t(i)] = b;
  named_[size_t(b)] = 1, hash_[size_t(b)] = hash, parent_[size_t(b)] = parent;
  std::copy(tokens, tokens + block_size_, tokens_.begin() + int64_t(b) * block_size_);
}

}  // namespace mtb
