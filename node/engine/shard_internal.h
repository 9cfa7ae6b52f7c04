// Shard's internals shared by its three files (internal to the engine):
// shard.cc (checks, lookups, expiry), shard_merge.cc (what comes from peers
// and from disk) and shard_collect.cc (what goes to peers and to disk).
// Finding a key's class and entry, the change marks, what waits to be sent,
// and the member templates more than one of them calls.
//
// Thread safety: as Shard's: the caller holds the shard's mu.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "node/engine/shard.h"

namespace tally {

// Slots examined for expiry on every insertion: enough that a table under
// churn never holds more than about twice its live keys.
constexpr size_t kSweepPerInsert = 2;

template <typename Entry>
LimitClass<Entry>* FindClass(std::vector<LimitClass<Entry>>& classes, Algorithm algorithm,
                             uint64_t window_ms) {
  for (auto& limit_class : classes) {
    if (limit_class.algorithm == algorithm && limit_class.window_ms == window_ms) {
      return &limit_class;
    }
  }
  return nullptr;
}

template <typename Entry>
Entry* FindEntry(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                 std::string_view key, size_t hash) {
  LimitClass<Entry>* limit_class = FindClass(classes, spec.algorithm, spec.window_ms);
  return limit_class ? limit_class->table->Find(key, hash) : nullptr;
}

// The same, trying first `probable`: an entry PrefetchProbableEntry returned
// for this key's class, mu held since (so it is an entry of that class's
// table, perhaps since erased or reused): it is the key's if it holds the key.
template <typename Entry>
Entry* FindEntry(std::vector<LimitClass<Entry>>& classes, const LimitSpec& spec,
                 std::string_view key, size_t hash, const void* probable) {
  auto* entry = static_cast<Entry*>(const_cast<void*>(probable));
  return entry && entry->key.view() == key ? entry : FindEntry(classes, spec, key, hash);
}

// A token bucket's memory outside its entry: level 0 its list of nodes,
// level 1 (once that has arrived) each node's slices.
inline void PrefetchBucket(const BucketEntry& entry, size_t level) {
  const std::vector<NodeSlices>& nodes = entry.state.nodes;
  if (level == 0) __builtin_prefetch(nodes.data());
  if (level == 1) {
    for (const NodeSlices& node : nodes) __builtin_prefetch(node.counts.data());
  }
}

// Sets `which` on the entry and lists it in its class, unless it is set already.
template <typename Entry>
void Mark(LimitClass<Entry>& limit_class, Entry* entry, int which) {
  if (entry->key.marked(which)) return;
  entry->key.set_marked(which, true);
  limit_class.changed[which].push_back(entry);
}

// Whether some of this node's admissions on the entry wait to be sent.
inline bool WaitsToBeSent(const CompactKey& key) {
  return key.marked(kGossipMark) || key.marked(kDeferredMark);
}

// What this node admitted on the entry and has not sent: counted exactly once
// coordination asked for it (RemoteCounts::own_unsent), else its own slots.
inline uint64_t UnsentNow(const CounterEntry* entry) {
  if (entry == nullptr || !WaitsToBeSent(entry->key)) return 0;
  const uint64_t own = uint64_t{entry->own_current} + entry->own_previous;
  const RemoteCounts* remote = entry->peers.full();
  if (!remote || remote->own_unsent == kUnsentUnknown) return own;
  return std::min<uint64_t>(remote->own_unsent, own);
}

inline uint64_t UnsentNow(const BucketEntry* entry) {
  return entry != nullptr && WaitsToBeSent(entry->key) ? entry->own_unsent : 0;
}

inline uint64_t UnsentNow(const LogEntry* entry) {
  return entry != nullptr && WaitsToBeSent(entry->key) ? entry->own_unsent : 0;
}

inline uint32_t Unsent32(uint64_t unsent) {
  return static_cast<uint32_t>(std::min<uint64_t>(unsent, kUnsentUnknown - 1));
}

template <typename Entry>
Status Shard::Ensure(KeyBudget& budget, std::vector<LimitClass<Entry>>& classes,
                     const LimitSpec& spec, std::string_view key, int64_t now_ms, Entry** entry) {
  if (*entry) return Status::OK();
  if (!budget.Reserve()) {
    return Status::ResourceExhausted("key limit reached: this node holds max_keys=" +
                                     std::to_string(budget.max_keys()) + " keys");
  }
  LimitClass<Entry>* limit_class = FindClass(classes, spec.algorithm, spec.window_ms);
  if (!limit_class) {
    limit_class = &classes.emplace_back();
    limit_class->algorithm = spec.algorithm;
    limit_class->window_ms = spec.window_ms;
    limit_class->table = std::make_unique<KeyTable<Entry>>(key_hash_seed);
  }
  budget.Release(limit_class->table->SweepSome(kSweepPerInsert, [&](const Entry& old) {
    return IsExpired(old, spec.algorithm, spec.window_ms, now_ms);
  }));
  *entry = limit_class->table->Insert(key);
  return Status::OK();
}

template <typename Entry>
void Shard::Wait(std::deque<typename LimitClass<Entry>::Deferred>& queue, Entry* entry,
                 int64_t now_ms, int64_t delay_ms) {
  const int64_t due_ms = ReleaseAtMs(now_ms + delay_ms, delay_ms);
  queue.push_back({entry, due_ms});
  if (due_ms >= next_release_ms) return;
  next_release_ms = due_ms;
  NoteGossipWork();
}

}  // namespace tally
