// When an admission must reach the peers soon: gossip that follows how close
// a key is to its limit (ARCHITECTURE.md "Gossip that follows contention").
//
// A node may keep its admissions on a key to itself for a while, as long as
// what all nodes keep to themselves together stays a small part of what
// remains of the limit. Each node keeps back at most 1 / (kHeadroomDivisor N)
// of what remains in its view (N: the members, itself included): with views
// alike, all that is kept back is at most 1/kHeadroomDivisor of what
// remains. The others decide without it, so near the limit the cluster may
// admit that much more than prompt gossip would: at most limit /
// kHeadroomDivisor, and about N units on a key whose limit is small. An
// admission that takes what the node keeps back beyond that is sent at the
// next gossip round, as every admission was before; one within it waits at
// most DeferralMs, so that counts far from a limit still converge within a
// known time. Near the limit every admission goes at once; far from it
// (most keys, most of the time) a key costs one delta per node per
// DeferralMs instead of one per gossip round in which it was admitted to.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "node/common/limit.h"

namespace tally {

inline constexpr uint64_t kHeadroomDivisor = 32;

// True when `unsent` (an upper bound of what this node admitted on the key
// and has not sent) is more than it may keep back of `remaining` (what its
// view leaves of the limit, after the admission) among `members` nodes.
inline bool OverHeadroomShare(uint64_t unsent, uint64_t remaining, size_t members) {
  // unsent * members * kHeadroomDivisor > remaining, without overflow.
  return unsent > remaining / ((members == 0 ? 1 : members) * kHeadroomDivisor);
}

// The longest an admission within the node's share may wait before it is
// sent: max_delay_ms, but at most a quarter of a counter's window (the
// previous window still counts in the next one) and an eighth of a token
// bucket's (its slices fold after a period, a quarter window: they must
// reach the peers before). 0 for the sliding log (sent every round) and when
// max_delay_ms is 0.
int64_t DeferralMs(Algorithm algorithm, uint64_t window_ms, int64_t max_delay_ms);

}  // namespace tally
