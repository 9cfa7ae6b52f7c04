#include "node/engine/range_digest.h"

#include <span>

#include "node/engine/mix.h"

namespace tally {
namespace {

// Folds values into a running hash, one Mix64 per value.
class Hasher {
 public:
  explicit Hasher(uint64_t key_hash) : hash_(key_hash) {}
  void Add(uint64_t value) { hash_ = Mix64(hash_ + value); }
  // One window's `size` slots (nullptr: none), by node, no zero count.
  template <typename Slots>
  void AddSlots(const Slots* slots, size_t size) {
    Add(size);
    if (slots == nullptr) return;
    slots->ForEach([&](NodeId node, uint64_t count) {
      Add(node);
      Add(count);
    });
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_;
};

// A window's slots as a snapshot holds them.
class SnapshotSlots {
 public:
  explicit SnapshotSlots(const GCounter& counter) : counter_(counter) {}
  size_t size() const { return counter_.slots().size(); }
  template <typename F>
  void ForEach(F&& f) const {
    for (const GCounter::Slot& slot : counter_.slots()) f(slot.node, slot.count);
  }

 private:
  const GCounter& counter_;
};

// A window's slots as an entry holds them: its own count and its peers', in
// the order ExportCounts gives its snapshot (by node, zero counts left out).
class EntrySlots {
 public:
  EntrySlots(const CounterEntry& entry, NodeId self, bool previous)
      : own_(previous ? entry.own_previous : entry.own_current),
        peers_(entry.peers.slots()),
        self_(self),
        previous_(previous) {}
  size_t size() const {
    size_t count = own_ != 0 ? 1 : 0;
    for (const PeerCounts::Slot& slot : peers_) count += Count(slot) != 0 ? 1 : 0;
    return count;
  }
  template <typename F>
  void ForEach(F&& f) const {
    bool own_done = own_ == 0;
    for (const PeerCounts::Slot& slot : peers_) {
      if (!own_done && self_ < slot.node) {
        f(self_, own_);
        own_done = true;
      }
      if (Count(slot) != 0) f(slot.node, Count(slot));
    }
    if (!own_done) f(self_, own_);
  }

 private:
  uint32_t Count(const PeerCounts::Slot& slot) const {
    return previous_ ? slot.previous : slot.current;
  }

  uint32_t own_;
  std::span<const PeerCounts::Slot> peers_;  // never this node's
  NodeId self_;
  bool previous_;
};

// A counting key's digest from its two windows' slots (window_index: the
// newer one's), whatever holds them.
template <typename Slots>
uint64_t CountsDigest(Algorithm algorithm, uint64_t window_ms, int64_t window_index,
                      const Slots& current, const Slots& previous, uint64_t key_hash,
                      int64_t ref_ms) {
  const int64_t window = ref_ms / static_cast<int64_t>(window_ms);
  // The slots of the window at ref_ms (nullptr: none) and of the one before it.
  const Slots* at_ref = &current;
  const Slots* before_ref = &previous;
  int64_t index = window_index;
  if (index == window - 1) {
    before_ref = &current;
    at_ref = nullptr;
    index = window;
  } else if (index < window - 1) {
    return 0;
  }  // index > window: a state ahead of ref_ms (another node's clock): hashed as it is
  const size_t at_ref_size = at_ref != nullptr ? at_ref->size() : 0;
  const size_t before_ref_size = before_ref->size();
  if (at_ref_size == 0 && before_ref_size == 0) return 0;
  Hasher hasher(key_hash);
  hasher.Add(static_cast<uint64_t>(algorithm));
  hasher.Add(window_ms);
  hasher.Add(static_cast<uint64_t>(index));
  hasher.AddSlots(at_ref, at_ref_size);
  hasher.AddSlots(before_ref, before_ref_size);
  return hasher.value();
}

uint64_t LogDigest(const KeySnapshot& snapshot, uint64_t key_hash, int64_t ref_ms) {
  const int64_t oldest_live_ms = ref_ms - static_cast<int64_t>(snapshot.window_ms);
  Hasher hasher(key_hash);
  hasher.Add(static_cast<uint64_t>(snapshot.algorithm));
  hasher.Add(snapshot.window_ms);
  bool any = false;
  for (const NodeStamps& node : snapshot.log) {  // by node id
    bool node_added = false;
    for (const LogStamp& stamp : node.stamps) {
      if (stamp.at_ms <= oldest_live_ms || stamp.cost == 0) continue;
      if (!node_added) hasher.Add(node.node);
      node_added = true;
      hasher.Add(static_cast<uint64_t>(stamp.at_ms));
      hasher.Add(stamp.cost);
    }
    any = any || node_added;
  }
  return any ? hasher.value() : 0;
}

uint64_t BucketDigest(const KeySnapshot& snapshot, uint64_t key_hash, int64_t ref_ms) {
  BucketSlices bucket = snapshot.bucket;
  const int64_t base = BucketBaseFor(BucketSliceAt(snapshot.window_ms, ref_ms));
  if (bucket.base_slice < base) FoldBucket(bucket, snapshot.window_ms, base);
  // else: a state ahead of ref_ms (another node's clock), hashed as it is
  Hasher hasher(key_hash);
  hasher.Add(static_cast<uint64_t>(snapshot.algorithm));
  hasher.Add(snapshot.window_ms);
  hasher.Add(bucket.capacity);
  hasher.Add(static_cast<uint64_t>(bucket.base_slice));
  hasher.Add(bucket.base_debt);
  bool any = bucket.base_debt != 0;
  for (const NodeSlices& node : bucket.nodes) {  // by node id
    for (size_t i = 0; i < node.counts.size(); ++i) {
      if (node.counts[i] == 0) continue;
      hasher.Add(node.node);
      hasher.Add(i);
      hasher.Add(node.counts[i]);
      any = true;
    }
  }
  return any ? hasher.value() : 0;
}

}  // namespace

uint64_t KeyDigest(const KeySnapshot& snapshot, uint64_t key_hash, int64_t ref_ms) {
  switch (snapshot.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowCounter: {
      const WindowCounts& counts = snapshot.counts;
      return CountsDigest(snapshot.algorithm, snapshot.window_ms, counts.window_index,
                          SnapshotSlots(counts.current), SnapshotSlots(counts.previous), key_hash,
                          ref_ms);
    }
    case Algorithm::kSlidingWindowLog: return LogDigest(snapshot, key_hash, ref_ms);
    case Algorithm::kTokenBucket: return BucketDigest(snapshot, key_hash, ref_ms);
  }
  return 0;
}

uint64_t CounterDigest(Algorithm algorithm, uint64_t window_ms, const CounterEntry& entry,
                       NodeId self, uint64_t key_hash, int64_t ref_ms) {
  return CountsDigest(algorithm, window_ms, entry.window_index, EntrySlots(entry, self, false),
                      EntrySlots(entry, self, true), key_hash, ref_ms);
}

}  // namespace tally
