// KeyTable<Entry>: the per-shard map from key to state, built for memory.
//
// Entries live densely in fixed-size chunks (no rehash ever moves them, and a
// growing table wastes at most one chunk); a flat hash index maps a key to a
// 4-byte handle. With 48-byte entries this holds a key in about 56-60 bytes,
// where a flat map of std::string to state would take 75-110 depending on
// its load factor.
//
// Entry must be default-constructible and movable, and have a member
// `CompactKey key`; a default (empty-key) entry marks a free slot.
//
// Thread safety: none; the owning shard's mutex guards the table.
// Pointers to entries stay valid until that entry is erased.
#pragma once

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <absl/container/flat_hash_set.h>

#include "node/engine/compact_key.h"

namespace tally {

// The one hash of a key; the engine picks a shard and a range from it and
// the table reuses it, so a key is hashed once per check. Seeded
// (Limiter::Options::key_hash_seed): nodes of a cluster share the seed, so
// that they split keys into the same ranges for anti-entropy, and clients do
// not know it, so they cannot choose keys that collide.
inline size_t HashKey(std::string_view key, uint64_t seed) {
  return XXH3_64bits_withSeed(key.data(), key.size(), seed);
}

template <typename Entry>
class KeyTable {
 public:
  explicit KeyTable(uint64_t seed) : seed_(seed), index_(0, IndexHash{this}, IndexEq{this}) {}
  KeyTable(const KeyTable&) = delete;  // the index's functors point at this
  KeyTable& operator=(const KeyTable&) = delete;

  // `hash` must be HashKey(key, seed).
  Entry* Find(std::string_view key, size_t hash) {
    auto it = index_.find(Probe{key, hash});
    return it == index_.end() ? nullptr : &At(*it);
  }

  // Prefetches the index memory that Find(key, hash) will read (it depends
  // on the hash alone). The empty asm gives the call a visible effect:
  // without it GCC finds the function pure (prefetches only read) and
  // deletes the call as dead code.
  void PrefetchIndex(size_t hash) const {
    index_.prefetch(HashOnly{hash});
    asm volatile("" ::: "memory");
  }

  // The entry that a key of this hash probably is, found by the hash alone:
  // reads the index (PrefetchIndex it first) and no entry, so that the entry
  // can be prefetched before Find compares it. It may be another key's, or
  // null; only for cache hints.
  const Entry* Probable(size_t hash) const {
    auto it = index_.find(HashOnly{hash});
    return it == index_.end() ? nullptr : &At(*it);
  }

  // Adds a default entry for a key that is not present; returns it.
  Entry* Insert(std::string_view key) {
    uint32_t handle;
    if (!free_handles_.empty()) {
      handle = free_handles_.back();
      free_handles_.pop_back();
    } else {
      if (next_unused_ % kChunkEntries == 0)
        chunks_.push_back(std::make_unique<Entry[]>(kChunkEntries));
      handle = next_unused_++;
    }
    Entry& entry = At(handle);
    entry.key.Assign(key);
    index_.insert(handle);
    return &entry;
  }

  size_t size() const { return index_.size(); }

  // Erases the key's entry; false when there is none.
  bool Erase(std::string_view key, size_t hash) {
    const auto it = index_.find(Probe{key, hash});
    if (it == index_.end()) return false;
    Erase(*it);
    return true;
  }

  // Examines up to `budget` slots after the sweep cursor and erases the live
  // entries for which is_expired(entry) holds. Returns how many it erased.
  template <typename IsExpired>
  size_t SweepSome(size_t budget, const IsExpired& is_expired) {
    size_t erased = 0;
    for (size_t i = 0; i < budget && next_unused_ > 0; ++i) {
      if (sweep_cursor_ >= next_unused_) sweep_cursor_ = 0;
      const uint32_t handle = sweep_cursor_++;
      Entry& entry = At(handle);
      if (!entry.key.empty() && is_expired(entry)) {
        Erase(handle);
        ++erased;
      }
    }
    return erased;
  }

  // Calls f(entry) for every live entry, and ahead(entry) for the live entry
  // `distance` handles on, before f reaches it: the entries lie in order, but
  // what they point to does not, so a pass over many keys prefetches it there.
  template <typename F, typename Ahead>
  void ForEach(const F& f, const Ahead& ahead, uint32_t distance) {
    for (uint32_t handle = 0; handle < next_unused_; ++handle) {
      if (distance < next_unused_ - handle) {
        const Entry& later = At(handle + distance);
        if (!later.key.empty()) ahead(later);
      }
      Entry& entry = At(handle);
      if (!entry.key.empty()) f(entry);
    }
  }

  template <typename IsExpired>
  size_t SweepAll(const IsExpired& is_expired) {
    sweep_cursor_ = 0;
    return SweepSome(next_unused_, is_expired);
  }

 private:
  static constexpr uint32_t kChunkEntries = 256;

  struct Probe {
    std::string_view key;
    size_t hash;
  };
  // Matches the first handle the index holds under the hash's control bits
  // (Eq says yes to any handle: Abseil's find, as Debian 12 ships it, does not
  // cross-check Eq against the hash).
  struct HashOnly {
    size_t hash;
  };
  struct IndexHash {
    using is_transparent = void;
    const KeyTable* table;
    size_t operator()(uint32_t handle) const {
      return HashKey(table->At(handle).key.view(), table->seed_);
    }
    size_t operator()(const Probe& probe) const { return probe.hash; }
    size_t operator()(const HashOnly& probe) const { return probe.hash; }
  };
  struct IndexEq {
    using is_transparent = void;
    const KeyTable* table;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t handle, const Probe& probe) const {
      return table->At(handle).key.view() == probe.key;
    }
    bool operator()(const Probe& probe, uint32_t handle) const { return (*this)(handle, probe); }
    bool operator()(uint32_t, const HashOnly&) const { return true; }
    bool operator()(const HashOnly&, uint32_t) const { return true; }
  };

  Entry& At(uint32_t handle) const {
    return chunks_[handle / kChunkEntries][handle % kChunkEntries];
  }

  void Erase(uint32_t handle) {
    index_.erase(handle);  // hashes the key, so it must still be in place
    At(handle) = Entry{};
    free_handles_.push_back(handle);
  }

  const uint64_t seed_;
  std::vector<std::unique_ptr<Entry[]>> chunks_;
  uint32_t next_unused_ = 0;  // handles below this have been handed out
  std::vector<uint32_t> free_handles_;
  uint32_t sweep_cursor_ = 0;
  absl::flat_hash_set<uint32_t, IndexHash, IndexEq> index_;
};

}  // namespace tally
