#include "mtb/tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <cstring>

#include "mtb/core/error.h"
#include "mtb/tokenizer/byte_level.h"
#include "mtb/tokenizer/utf8.h"

namespace mtb::tok {

namespace {
constexpr size_t kMaxCachedPiece = 64;     // bytes; longer pre-tokens are not cached
constexpr size_t kCacheCapacity = 100000;  // entries; the cache stops growing when full
constexpr size_t kScanMergeLimit = 96;     // symbols; longer words merge with a heap
constexpr uint64_t kNoText = ~0ull;
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
}  // namespace

// Pre-token -> ids, shared by all threads (readers share a lock; a writer that cannot get
// it at once skips caching). A flat table that stops taking entries when full.
// Pre-token -> ids, shared by all threads (readers share a lock; a writer that cannot get
// it at once skips caching). A flat table that grows to kMaxSlots and then stops taking entries.
struct BpeModel::Cache {
  struct Slot {
    uint32_t hash = 0, key_off = 0, ids_off = 0;
    uint16_t key_len = 0, n_ids = 0;  // key_len 0: empty (pre-tokens are never empty)
  };
  static constexpr size_t kMaxSlots = size_t(1) << 18;
  mutable std::shared_mutex mu;
  std::vector<Slot> slots;  // a power of two, allocated on first insert
  std::string keys;
  std::vector<int32_t> ids;
  size_t count = 0;

  bool get(std::string_view key, uint32_t h, std::vector<int32_t>& out) const {
    std::shared_lock lock(mu);
    if (slots.empty()) return false;
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& sl = slots[i];
      if (sl.key_len == 0) return false;
      if (sl.hash == h && sl.key_len == key.size() && std::memcmp(keys.data() + sl.key_off, key.data(), key.size()) == 0) {
        out.insert(out.end(), ids.begin() + sl.ids_off, ids.begin() + sl.ids_off + sl.n_ids);
        return true;
      }
    }
  }
  void place(const Slot& s) {
    const size_t mask = slots.size() - 1;
    size_t i = s.hash & mask;
    while (slots[i].key_len != 0) i = (i + 1) & mask;
    slots[i] = s;
  }
  void put(std::string_view key, uint32_t h, const int32_t* v, size_t n) {
    std::unique_lock lock(mu, std::try_to_lock);
    if (!lock.owns_lock() || count >= kCacheCapacity || n > 0xFFFF) return;
    if ((count + 1) * 2 > slots.size()) {
      if (slots.size() >= kMaxSlots) return;
      std::vector<Slot> old = std::move(slots);
      slots.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
      for (const Slot& s : old)
        if (s.key_len != 0) place(s);
    }
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask; slots[i].key_len != 0; i = (i + 1) & mask)
      if (slots[i].hash == h && slots[i].key_len == key.size() &&
          std::memcmp(keys.data() + slots[i].key_off, key.data(), key.size()) == 0)
        return;
    place({h, uint32_t(keys.size()), uint32_t(ids.size()), uint16_t(key.size()), uint16_t(n)});
    keys.append(key);
    ids.insert(ids.end(), v, v + n);
    ++count;
  }
};

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

void BpeModel::reserve(size_t vocab_size, size_t text_bytes) {
  vocab_.reserve(vocab_size);
  vocab_.reserve_bytes(text_bytes);
  id_text_.reserve(vocab_size);
  merge_arena_.reserve(text_bytes);
  merge_refs_.reserve(vocab_size * 4);
}

void BpeModel::add_token(std::string_view token, int32_t id) {
  int32_t replaced = -1;
  const uint64_t where = vocab_.insert(token, id, &replaced);
  if (replaced >= 0 && replaced != id) id_text_[size_t(replaced)] = kNoText;  // the string moved to `id`
  if (id >= int32_t(id_text_.size())) id_text_.resize(size_t(id) + 1, kNoText);
  id_text_[size_t(id)] = where;
}

void BpeModel::add_merge(std::string_view left, std::string_view right) {
  merge_refs_.push_back(uint32_t(merge_arena_.size()));
  merge_refs_.push_back(uint32_t(left.size()));
  merge_arena_.append(left);
  merge_refs_.push_back(uint32_t(merge_arena_.size()));
  merge_refs_.push_back(uint32_t(right.size()));
  merge_arena_.append(right);
}

bool BpeModel::add_merge_line(std::string_view line) {
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) return false;
  add_merge(line.substr(0, sp), line.substr(sp + 1));
  return true;
}

std::string_view BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= id_text_.size() || id_text_[size_t(id)] == kNoText) return {};
  return vocab_.text(id_text_[size_t(id)]);
}

int32_t BpeModel::raw_to_id(std::string_view raw) const {
  thread_local std::string mapped;
  mapped.clear();
  const ByteLevelAlphabet& alpha = byte_level_alphabet();
  for (const char c : raw) utf8_append(mapped, alpha.to_char[uint8_t(c)]);
  return vocab_.find(mapped);
}

void BpeModel::finalize(bool byte_level_input, const std::string& where) {
  unk_id_ = options.unk_token ? vocab_.find(*options.unk_token) : -1;
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    fallback_ids_[size_t(b)] = vocab_.find(name);
  }
  // Symbols whose token text is not the text they stand for: merging them breaks chunking.
  std::vector<uint8_t> opaque(size_t(id_end()) + 1, 0);
  if (unk_id_ >= 0) opaque[size_t(unk_id_)] = 1;
  for (const int32_t f : fallback_ids_)
    if (f >= 0) opaque[size_t(f)] = 1;
  bool opaque_merged = false;

  // Merges: (left, right) -> (rank, id of left + right without the continuing prefix).
  // Done in batches whose table slots are prefetched first: the lookups are cache misses.
  const size_t n_merges = merge_refs_.size() / 4;
  merges_.reserve(n_merges);
  const size_t prefix_len = options.continuing_subword_prefix.size();
  constexpr size_t kBatch = 16;
  std::string joined[kBatch];
  uint32_t ha[kBatch], hb[kBatch], hj[kBatch];
  int32_t ia[kBatch], ib[kBatch];
  auto part = [&](size_t r, int k) {
    const uint32_t* m = &merge_refs_[r * 4 + size_t(k) * 2];
    return std::string_view(merge_arena_.data() + m[0], m[1]);
  };
  for (size_t r0 = 0; r0 < n_merges; r0 += kBatch) {
    const size_t nb = std::min(kBatch, n_merges - r0);
    for (size_t k = 0; k < nb; ++k) {
      const std::string_view a = part(r0 + k, 0), b = part(r0 + k, 1);
      ha[k] = uint32_t(hash_bytes(a.data(), a.size()));
      hb[k] = uint32_t(hash_bytes(b.data(), b.size()));
      vocab_.prefetch(ha[k]);
      vocab_.prefetch(hb[k]);
      joined[k].assign(a);
      joined[k].append(b.substr(std::min(prefix_len, b.size())));
      hj[k] = uint32_t(hash_bytes(joined[k].data(), joined[k].size()));
      vocab_.prefetch(hj[k]);
    }
    for (size_t k = 0; k < nb; ++k) {
      const size_t r = r0 + k;
      ia[k] = vocab_.find_hashed(part(r, 0), ha[k]);
      ib[k] = vocab_.find_hashed(part(r, 1), hb[k]);
      if (ia[k] < 0 || ib[k] < 0)
        throw Error(where + ": merge " + std::to_string(r) + " uses '" + std::string(part(r, ia[k] < 0 ? 0 : 1)) +
                    "', which is not in the vocab");
      merges_.prefetch(ia[k], ib[k]);
      opaque_merged = opaque_merged || opaque[size_t(ia[k])] || opaque[size_t(ib[k])];
    }
    for (size_t k = 0; k < nb; ++k) {
      const size_t r = r0 + k;
      const int32_t id = vocab_.find_hashed(joined[k], hj[k]);
      if (id < 0) throw Error(where + ": merge " + std::to_string(r) + " makes '" + joined[k] + "', which is not in the vocab");
      merges_.insert(ia[k], ib[k], uint32_t(r), id);
    }
  }
  std::string().swap(merge_arena_);
  std::vector<uint32_t>().swap(merge_refs_);


  // SentencePiece-style words run to the next "▁": a merged token never spans a "▁" whose
  // preceding character no token has before a "▁" (Gemma's ">▁</" is one that does). Long
  // pieces are cut there and their chunks merged (and cached) one by one, with the same result.
  chunk_at_space_ = !byte_level_input && options.continuing_subword_prefix.empty() &&
                    options.end_of_word_suffix.empty() && !opaque_merged && vocab_.find(kSpace) >= 0;
  if (chunk_at_space_) {
    for (int32_t id = 0; id < id_end(); ++id) {
      const std::string_view t = id_to_token(id);
      for (size_t at = t.find(kSpace, 1); at != std::string_view::npos; at = t.find(kSpace, at + 1)) {
        size_t b = at - 1;
        while (b > 0 && (uint8_t(t[b]) & 0xC0) == 0x80) --b;
        size_t len = 0;
        space_joiners_.push_back(utf8_decode(t, b, len));
      }
    }
    std::sort(space_joiners_.begin(), space_joiners_.end());
    space_joiners_.erase(std::unique(space_joiners_.begin(), space_joiners_.end()), space_joiners_.end());
  }

  byte_level_input_ = byte_level_input;
  if (byte_level_input) {
    const ByteLevelAlphabet& alpha = byte_level_alphabet();
    byte_ids_complete_ = true;
    std::string ch;
    for (int b = 0; b < 256; ++b) {
      ch.clear();
      utf8_append(ch, alpha.to_char[size_t(b)]);
      byte_ids_[size_t(b)] = vocab_.find(ch);
      byte_ids_complete_ = byte_ids_complete_ && byte_ids_[size_t(b)] >= 0;
    }
  }
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options.ignore_merges) {
    const int32_t id = byte_level_input_ ? raw_to_id(piece) : vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (chunk_at_space_ && piece.size() > 8) {
    size_t begin = 0;
    for (size_t at = piece.find(kSpace, 1); at != std::string_view::npos; at = piece.find(kSpace, at + 3)) {
      size_t b = at - 1;
      while (b > begin && (uint8_t(piece[b]) & 0xC0) == 0x80) --b;
      size_t len = 0;
      const uint32_t before = utf8_decode(piece, b, len);
      if (std::binary_search(space_joiners_.begin(), space_joiners_.end(), before)) continue;
      tokenize_chunk(piece.substr(begin, at - begin), out);
      begin = at;
    }
    tokenize_chunk(piece.substr(begin), out);
    return;
  }
  tokenize_chunk(piece, out);
}

void BpeModel::tokenize_chunk(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kMaxCachedPiece) {
    tokenize_uncached(piece, out);
    return;
  }
  const uint32_t h = uint32_t(hash_bytes(piece.data(), piece.size()));
  if (cache_->get(piece, h, out)) return;
  const size_t start = out.size();
  tokenize_uncached(piece, out);
  cache_->put(piece, h, out.data() + start, out.size() - start);
}

void BpeModel::tokenize_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> syms;
  syms.clear();
  initial_symbols(piece, syms);
  merge(syms);
  out.insert(out.end(), syms.begin(), syms.end());
}

void BpeModel::initial_symbols(std::string_view s, std::vector<int32_t>& syms) const {
  if (byte_level_input_) {
    if (byte_ids_complete_) {
      for (const char c : s) syms.push_back(byte_ids_[uint8_t(c)]);
      return;
    }
    // A vocab without the whole alphabet: spell the word out and take the general path.
    std::string mapped;
    const ByteLevelAlphabet& alpha = byte_level_alphabet();
    for (const char c : s) utf8_append(mapped, alpha.to_char[uint8_t(c)]);
    char_symbols(mapped, syms);
    return;
  }
  char_symbols(s, syms);
}

void BpeModel::char_symbols(std::string_view s, std::vector<int32_t>& syms) const {
  // One symbol per character (continuing prefix on all but the first, suffix on the last);
  // a character missing from the vocab becomes its <0xXX> bytes (byte_fallback) or the
  // unknown token (consecutive ones fused with fuse_unk), or is dropped when there is none.
  const bool affixes = !options.continuing_subword_prefix.empty() || !options.end_of_word_suffix.empty();
  bool pending_unk = false;
  std::string buf;
  for (size_t i = 0; i < s.size();) {
    const size_t len = std::min(utf8_char_len(uint8_t(s[i])), s.size() - i);
    std::string_view ch = s.substr(i, len);
    if (affixes) {
      buf.clear();
      if (i > 0) buf += options.continuing_subword_prefix;
      buf += ch;
      if (i + len == s.size()) buf += options.end_of_word_suffix;
      ch = buf;
    }
    i += len;
    const int32_t id = vocab_.find(ch);
    if (id >= 0) {
      if (pending_unk) {
        syms.push_back(unk_id_);
        pending_unk = false;
      }
      syms.push_back(id);
      continue;
    }
    if (options.byte_fallback) {
      bool all = true;
      for (const char c : ch) all = all && fallback_ids_[uint8_t(c)] >= 0;
      if (all) {
        // As in the Rust library, a pending unknown token is not flushed first.
        for (const char c : ch) syms.push_back(fallback_ids_[uint8_t(c)]);
        continue;
      }
    }
    if (options.unk_token) {
      if (unk_id_ < 0) throw Error("BPE: the unknown token '" + *options.unk_token + "' is not in the vocab");
      if (pending_unk && !options.fuse_unk) syms.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) syms.push_back(unk_id_);
}

void BpeModel::merge(std::vector<int32_t>& syms) const {
  const size_t n0 = syms.size();
  if (n0 < 2) return;
  if (n0 > kScanMergeLimit) {
    merge_heap(syms);
    return;
  }
  // Small words: keep each adjacent pair's (rank, merged id) and merge the lowest rank,
  // leftmost first, until no pair has a merge. Same order as the Rust library's queue.
  uint32_t rank[kScanMergeLimit];
  int32_t made[kScanMergeLimit];
  int32_t* ids = syms.data();
  size_t n = n0;
  auto look = [&](size_t i) {
    const PairTable::Slot* s = merges_.find(ids[i], ids[i + 1]);
    rank[i] = s ? s->rank : UINT32_MAX;
    made[i] = s ? s->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == UINT32_MAX) break;
    ids[best] = made[best];
    for (size_t i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
    for (size_t i = best; i + 2 < n; ++i) {
      rank[i] = rank[i + 1];
      made[i] = made[i + 1];
    }
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  syms.resize(n);
}

void BpeModel::merge_heap(std::vector<int32_t>& syms) const {
  // The Rust library's algorithm: a min-queue of (rank, position), symbols in a linked list,
  // stale entries skipped when popped.
  const size_t n = syms.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  struct Item {
    uint32_t rank;
    uint32_t pos;
    int32_t id;
    bool operator>(const Item& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  for (size_t i = 0; i + 1 < n; ++i)
    if (const PairTable::Slot* s = merges_.find(syms[i], syms[i + 1])) queue.push({s->rank, uint32_t(i), s->id});
  while (!queue.empty()) {
    const Item top = queue.top();
    queue.pop();
    const size_t p = top.pos;
    if (!alive[p] || next[p] < 0) continue;
    const size_t q = size_t(next[p]);
    const PairTable::Slot* s = merges_.find(syms[p], syms[q]);
    if (!s || s->id != top.id) continue;  // stale
    syms[p] = top.id;
    alive[q] = 0;
    next[p] = next[q];
    if (next[q] >= 0) prev[size_t(next[q])] = int32_t(p);
    if (prev[p] >= 0) {
      const size_t l = size_t(prev[p]);
      if (const PairTable::Slot* t = merges_.find(syms[l], syms[p])) queue.push({t->rank, uint32_t(l), t->id});
    }
    if (next[p] >= 0) {
      if (const PairTable::Slot* t = merges_.find(syms[p], syms[size_t(next[p])]))
        queue.push({t->rank, uint32_t(p), t->id});
    }
  }
  size_t w = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) syms[w++] = syms[i];
  syms.resize(w);
}

}  // namespace mtb::tok
