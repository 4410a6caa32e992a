// Flat hash tables for the tokenizer's hot paths: token string -> id over one string arena,
// and (left id, right id) -> (merge rank, merged id). Open addressing, power-of-two sizes.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace mtb::tok {

inline uint64_t hash_bytes(const char* p, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0x243F6A8885A308D3ull ^ (n * kMul);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * kMul;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

// String -> int32 id. Strings are copied into one arena; each slot holds the hash, place
// and id of its string, so a lookup touches one slot and the arena. Inserting an existing
// string replaces its id (as a JSON object with a repeated key does in serde).
class StringTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap * 3 < n * 4) cap <<= 1;  // load <= 3/4
    if (cap > slots_.size()) rehash(cap);
  }
  void reserve_bytes(size_t n) { arena_.reserve(n); }
  // Returns where the string lies in the arena (see text()); `replaced` gets the id it had, or -1.
  uint64_t insert(std::string_view s, int32_t id, int32_t* replaced = nullptr) {
    if ((count_ + 1) * 4 > slots_.size() * 3) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint32_t h = uint32_t(hash_bytes(s.data(), s.size()));
    size_t i = h & (slots_.size() - 1);
    if (replaced) *replaced = -1;
    while (slots_[i].id >= 0) {
      Slot& e = slots_[i];
      if (e.hash == h && e.len == s.size() && std::memcmp(arena_.data() + e.off, s.data(), s.size()) == 0) {
        if (replaced) *replaced = e.id;
        e.id = id;
        return (uint64_t(e.off) << 32) | e.len;
      }
      i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = {h, uint32_t(s.size()), uint32_t(arena_.size()), id};
    arena_.append(s);
    ++count_;
    return (uint64_t(slots_[i].off) << 32) | slots_[i].len;
  }
  int32_t find(std::string_view s) const { return find_hashed(s, uint32_t(hash_bytes(s.data(), s.size()))); }
  int32_t find_hashed(std::string_view s, uint32_t h) const {
    if (slots_.empty()) return -1;
    size_t i = h & (slots_.size() - 1);
    while (true) {
      const Slot& e = slots_[i];
      if (e.id < 0) return -1;
      if (e.hash == h && e.len == s.size() && std::memcmp(arena_.data() + e.off, s.data(), s.size()) == 0) return e.id;
      i = (i + 1) & (slots_.size() - 1);
    }
  }
  void prefetch(uint32_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & (slots_.size() - 1)]);
  }
  std::string_view text(uint64_t where) const { return {arena_.data() + (where >> 32), size_t(uint32_t(where))}; }
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint32_t hash, len, off;
    int32_t id;  // -1: empty
  };
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{0, 0, 0, -1});
    for (const Slot& e : old) {
      if (e.id < 0) continue;
      size_t i = e.hash & (cap - 1);
      while (slots_[i].id >= 0) i = (i + 1) & (cap - 1);
      slots_[i] = e;
    }
  }
  std::vector<Slot> slots_;
  size_t count_ = 0;
  std::string arena_;
};

// (left, right) token ids -> (rank, merged id).
class PairTable {
 public:
  struct Slot {
    uint64_t key;
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap * 3 < n * 4) cap <<= 1;  // load <= 3/4
    slots_.assign(cap, Slot{kEmpty, 0, -1});
    mask_ = cap - 1;
  }
  // Later inserts of the same pair win (as a Rust HashMap built from an iterator).
  void insert(int32_t a, int32_t b, uint32_t rank, int32_t id) {
    if ((count_ + 1) * 4 > slots_.size() * 3) grow();
    const uint64_t key = make_key(a, b);
    size_t i = slot_of(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++count_;
    slots_[i] = {key, rank, id};
  }
  void prefetch(int32_t a, int32_t b) const { __builtin_prefetch(&slots_[slot_of(make_key(a, b))]); }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t key = make_key(a, b);
    size_t i = slot_of(key);
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t make_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t slot_of(uint64_t key) const {  // murmur3's finalizer
    uint64_t h = key;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h & mask_;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const size_t cap = old.empty() ? 16 : old.size() * 2;
    slots_.assign(cap, Slot{kEmpty, 0, -1});
    mask_ = cap - 1;
    count_ = 0;
    for (const Slot& s : old)
      if (s.key != kEmpty) insert(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.rank, s.id);
  }
  std::vector<Slot> slots_ = std::vector<Slot>(16, Slot{kEmpty, 0, -1});
  size_t mask_ = 15;
  size_t count_ = 0;
};

}  // namespace mtb::tok
