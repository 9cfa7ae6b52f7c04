#include "node/engine/range_digest.h"

#include "node/engine/mix.h"

namespace tally {
namespace {

// Folds values into a running hash, one Mix64 per value.
class Hasher {
 public:
  explicit Hasher(uint64_t key_hash) : hash_(key_hash) {}
  void Add(uint64_t value) { hash_ = Mix64(hash_ + value); }
  void Add(const GCounter& counter) {
    Add(counter.slots().size());
    for (const GCounter::Slot& slot : counter.slots()) {  // sorted, no zero count
      Add(slot.node);
      Add(slot.count);
    }
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_;
};

uint64_t CountsDigest(const KeySnapshot& snapshot, uint64_t key_hash, int64_t ref_ms) {
  const WindowCounts& counts = snapshot.counts;
  const int64_t window = ref_ms / static_cast<int64_t>(snapshot.window_ms);
  static const GCounter kNone;
  // The counts of the window at ref_ms and of the one before it.
  const GCounter* current = &counts.current;
  const GCounter* previous = &counts.previous;
  int64_t index = counts.window_index;
  if (index == window - 1) {
    previous = &counts.current;
    current = &kNone;
    index = window;
  } else if (index < window - 1) {
    return 0;
  }  // index > window: a state ahead of ref_ms (another node's clock): hashed as it is
  if (current->empty() && previous->empty()) return 0;
  Hasher hasher(key_hash);
  hasher.Add(static_cast<uint64_t>(snapshot.algorithm));
  hasher.Add(snapshot.window_ms);
  hasher.Add(static_cast<uint64_t>(index));
  hasher.Add(*current);
  hasher.Add(*previous);
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
    case Algorithm::kSlidingWindowCounter: return CountsDigest(snapshot, key_hash, ref_ms);
    case Algorithm::kSlidingWindowLog: return LogDigest(snapshot, key_hash, ref_ms);
    case Algorithm::kTokenBucket: return BucketDigest(snapshot, key_hash, ref_ms);
  }
  return 0;
}

}  // namespace tally
