// BlockPool: the bookkeeping of a paged KV cache. The cache's rows are cut into blocks of
// block_size token rows (every layer alike); a sequence's cache is a block table, a list of
// block ids. Blocks are reference-counted, so sequences whose prompts begin alike share them.
//
// The prefix cache: a full block is named by a chain hash of the tokens it holds and of every
// token before it (the hash of the block before, mixed with its own tokens), and kept with
// its tokens and its parent's hash, which a lookup compares too. A block nobody references
// stays cached (findable) until its room is needed: allocate() takes never-named blocks
// first, then evicts the least recently released cached one, which from then on cannot be
// found. Nothing allocates after construction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mtb {

class BlockPool {
 public:
  // Throws mtb::Error for a non-positive count or size.
  BlockPool(int n_blocks, int block_size);

  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  int referenced() const { return referenced_; }  // blocks some sequence holds
  int cached() const { return cached_; }          // held by none, still findable
  // Blocks allocate() can hand out now: never-named ones plus evictable cached ones.
  int available() const { return n_blocks_ - referenced_; }
  int64_t evictions() const { return evictions_; }

  // A block for a sequence to write (reference count 1), or -1 when every block is held.
  int allocate();
  void retain(int block);
  // Drops a reference; at zero a named block stays cached (most recently used), another
  // goes back to the free list.
  void release(int block);

  // The chain hash of a block of tokens whose predecessor's hash is `parent` (0 for the first).
  static uint64_t chain_hash(uint64_t parent, const int32_t* tokens, int n);
  // The cached or referenced block named `hash` holding exactly `tokens` after `parent`,
  // with a reference taken; or -1.
  int lookup(uint64_t hash, uint64_t parent, const int32_t* tokens);
  // Names a full block (held by the caller) so later sequences can find it. A name already
  // taken by another block keeps that one.
  void name(int block, uint64_t hash, uint64_t parent, const int32_t* tokens);
  bool is_named(int block) const { return named_[size_t(block)] != 0; }

 private:
  int find_slot(uint64_t hash) const;  // the slot holding hash, or -1
  void unname(int block);              // removes a block's name (eviction)
  void lru_remove(int block);
  void lru_push_back(int block);

  int n_blocks_, block_size_;
  int referenced_ = 0, cached_ = 0;
  int64_t evictions_ = 0;
  std::vector<int32_t> refs_;
  std::vector<uint8_t> named_;
  std::vector<uint64_t> hash_, parent_;
  std::vector<int32_t> tokens_;        // [n_blocks][block_size] of named blocks
  std::vector<int32_t> free_;          // a stack of never-named, unreferenced blocks
  std::vector<int32_t> prev_, next_;   // the LRU list of cached blocks (head: least recent)
  int lru_head_ = -1, lru_tail_ = -1;
  // Open addressing (linear probing, backward-shift deletion): slot -> block, -1 empty.
  std::vector<int32_t> slots_;
  uint64_t mask_ = 0;
};

}  // namespace mtb
