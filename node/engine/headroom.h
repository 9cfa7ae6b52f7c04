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
// Thread safety: pure functions; DeferralLosses says its own.
#pragma once

#include <array>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "node/common/key_snapshot.h"
#include "node/common/limit.h"
#include "node/common/node_id.h"

namespace tally {

inline constexpr uint64_t kHeadroomDivisor = 32;

// The most a node may keep back of `remaining` (what its view leaves of the
// limit, after the admission) among `members` nodes.
inline uint64_t HeadroomShare(uint64_t remaining, size_t members) {
  return remaining / ((members == 0 ? 1 : members) * kHeadroomDivisor);
}

// True when `unsent` (an upper bound of what this node admitted on the key
// and has not sent) is more than it may keep back of `remaining`.
inline bool OverHeadroomShare(uint64_t unsent, uint64_t remaining, size_t members) {
  return unsent > HeadroomShare(remaining, members);
}

// The longest an admission within the node's share may wait before it is
// sent: max_delay_ms, but at most a quarter of a counter's window (the
// previous window still counts in the next one) and an eighth of a token
// bucket's (its slices fold after a period, a quarter window: they must
// reach the peers before). 0 for the sliding log (sent every round) and when
// max_delay_ms is 0.
int64_t DeferralMs(Algorithm algorithm, uint64_t window_ms, int64_t max_delay_ms);

// What waits is released in steps of wall time, each a kReleaseSteps-th of
// the wait (delay_ms: DeferralMs, or a relay's hold or confirmation time):
// an entry due at due_ms goes at the last step at or before it, up to a
// step early and never late. So what falls due within one step goes to the
// peers in one gossip round, one message each, instead of in a round (every
// gossip interval) after each admission's own due time: after a load of far
// keys most of what replication cost beyond the merges themselves was per
// message (wake-ups, system calls, seals). Steps are alike on every node.
// due_ms: wall time, never negative.
inline constexpr int64_t kReleaseSteps = 8;
inline int64_t ReleaseAtMs(int64_t due_ms, int64_t delay_ms) {
  const int64_t step_ms = delay_ms / kReleaseSteps;
  return step_ms <= 1 ? due_ms : due_ms - due_ms % step_ms;
}

// Relay (node/engine/shard.h): an admission that waited (within the node's
// share, far from the limit) goes, when due, to one member only, the key's
// relayer, instead of to every peer; the relayer holds what it is sent for
// up to DeferralMs too, then sends every node's slots of the key to every
// peer at once. So a key that t nodes admit to costs t + N - 2 entries per
// DeferralMs instead of t (N - 1). Until the relayer's message comes back
// with this node's slots, what was relayed counts as not sent (the share
// above still bounds it); if none comes within RelayConfirmMs, it is
// relayed again, to whichever member is the relayer by then.
//
// The relayer of a key: of `members` (this node among them; any order),
// the one whose id scores highest with the key's relay hash (rendezvous
// hashing: when a member comes or goes, only its keys move). Every node
// computes the same relayer from the same members; views that differ for a
// while give a key two relayers, which costs entries, never counts. 0 when
// members is empty.
NodeId RelayerFor(uint64_t relay_hash, std::span<const NodeId> members);
// The key's relay hash: the same on every node and build of a platform
// (std::hash of the bytes, unseeded, unlike the key tables' hash).
uint64_t RelayHash(std::string_view key);
// How long a node waits, after relaying, for the relayer's message with its
// slots: the relayer's hold (deferral_ms) and as long again for the rounds.
inline int64_t RelayConfirmMs(int64_t deferral_ms) { return 2 * deferral_ms; }

// Where gossip collection sends what it relays: `members` are the nodes that
// may relay (this node, if it relays, and the peers that do and that a link
// reaches); `sink` takes a snapshot for its relayer. Fewer than two members:
// nothing is relayed.
struct GossipRelay {
  std::span<const NodeId> members;
  std::function<void(NodeId relayer, const KeySnapshot&)> sink;
};

// What a merged snapshot is: part of a full sync (or a restore, a test);
// a peer's delta, sent to every peer (it may carry this node's own slots
// back from their relayer); or a delta sent to this node as the relayer.
enum class MergeSource { kSync, kDelta, kRelay };

// What members may have kept back and lost: a peer whose link went down
// without its leaving (it may have crashed, its kept-back admissions unheard
// by anyone; restarted, it recovers only what it had written to disk), or a
// member, this node included, that restarted after a crash
// (node/gossip/member_losses.h). Each loss is seen at a wall time; until the
// windows that began before it no longer count, every check counts a
// headroom share of the whole limit per loss as spent
// (Coordination::LimitAfterLosses), so that what was lost never lets the
// cluster pass the limit. The owner replaces the whole set whenever it
// changes (a loss that turns out not to be one is left out of the next set).
// Up to kSlots losses are kept apart; beyond that the older ones count
// together at the time of the newest of them, which makes them count for
// longer, never shorter.
//
// Thread safety: Set from one thread at a time (the gossip thread; at start,
// before it runs); CountSince from any (relaxed atomics: a check that reads a
// loss set a moment ago as not yet set is a check made a moment earlier).
class DeferralLosses {
 public:
  static constexpr size_t kSlots = 8;

  DeferralLosses() = default;
  // The losses now, each seen at its wall time (ms, never negative).
  void Set(std::span<const int64_t> seen_at_ms);
  // How many of the losses were seen at or after since_ms.
  size_t CountSince(int64_t since_ms) const {
    // Usually none, or all long ago: one load.
    if (newest_ms_.load(std::memory_order_relaxed) < since_ms) return 0;
    size_t count = 0;
    for (const std::atomic<uint64_t>& slot : slots_) {
      const uint64_t packed = slot.load(std::memory_order_relaxed);
      if (static_cast<int64_t>(packed & kAtMask) >= since_ms) count += packed >> kAtBits;
    }
    return count;
  }

 private:
  // A slot packs how many losses it counts (high bits) over the wall time
  // they were seen at (low kAtBits: ms up to the year 2109); 0 counts none.
  static constexpr int kAtBits = 42;
  static constexpr uint64_t kAtMask = (uint64_t{1} << kAtBits) - 1;
  std::array<std::atomic<uint64_t>, kSlots> slots_{};
  std::atomic<int64_t> newest_ms_{INT64_MIN};
};

}  // namespace tally
