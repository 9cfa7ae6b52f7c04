// Digests of replicated state, for anti-entropy by key ranges: peers compare
// a range's digest and send the range only when the digests differ
// (node/gossip/gossip.h, "Anti-entropy").
//
// A key's digest hashes what its snapshot replicates (every node's counts,
// stamps or slices; never denials, nor a bucket's heard debt, which is this
// node's view) as it counts at a reference time: windows that have ended by
// then are dropped, a log's stamps that have left its window too, and a
// bucket is folded to that time's base. So two nodes that hold the same state
// of a key compute the same digest at the same reference time, however their
// entries have moved with time since. A range's digest is the sum of its
// keys' digests, in any order; a key with nothing that counts adds 0.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "node/common/key_snapshot.h"
#include "node/engine/key_state.h"

namespace tally {

// The digest of the snapshot's replicated state at ref_ms (wall ms); 0 when
// none of it counts then. key_hash: the key's hash as the key table has it
// (HashKey with the cluster's seed, alike on every node), so that a pass over
// a shard hashes each key once.
uint64_t KeyDigest(const KeySnapshot& snapshot, uint64_t key_hash, int64_t ref_ms);

// The same digest for a counting key (fixed window, sliding-window counter)
// read from its entry on `self`, without a snapshot: equal to KeyDigest of
// the snapshot the entry exports, at a fraction of the cost (a digest pass
// reads every key the node holds).
uint64_t CounterDigest(Algorithm algorithm, uint64_t window_ms, const CounterEntry& entry,
                       NodeId self, uint64_t key_hash, int64_t ref_ms);

}  // namespace tally
