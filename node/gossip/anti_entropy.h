// Anti-entropy by digests of key ranges (node/gossip/gossip.h,
// "Anti-entropy"): what a node tells a peer at each interval, and how it
// answers a peer's digests. No I/O: the links send what these return.
//
// Every full_sync_interval_ms of wall time, at the same instants on every
// node, a link sends its peer the digests (node/engine/range_digest.h) of the
// ranges that changed since their digests last went out (DigestLedger), or
// that the peer answered it would compare later, once they are quiet: every
// change to them has had time to reach the peer (Limiter::RangeVersion). The peer compares each
// with its own digest of the range at the same reference time, if the range is quiet there too.
// Those that differ, or that are not quiet there yet, it compares again RecheckMs later, and
// answers then: with those that still differ (the link sends them whole) and those still not quiet
// (their digests go again at the next interval). Digests are computed one shard at a time (a
// shard's lock is held for one pass over its keys), so that callers can let other work run in
// between, and at most once per shard and reference time: a range that changes after that waits for
// the next interval.
//
// Thread safety: functions of the Limiter's state, which is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "node/engine/limiter.h"
#include "protocol/peer_codec.h"

namespace tally {

// How long after the last change to a range anti-entropy waits before it
// compares the range: a few gossip rounds, for what is on its way.
inline int64_t QuietMs(int64_t interval_ms) { return 4 * interval_ms; }

// How long after a peer's digest of a range differed from this node's, or
// found the range not quiet here, the two are compared again before the
// node answers: what was on its way to it (a relayer's queue, a busy peer)
// has arrived by then, so a range that differed only for that is not sent,
// and one that was not quiet yet costs no second round of digests.
inline int64_t RecheckMs(int64_t interval_ms) { return 40 * interval_ms; }

// The most ranges a node asks one peer for in one anti-entropy interval;
// beyond it, it answers that it will compare them again later. A lost delta
// costs one range; ranges that differ only because a node is too busy to
// take in what is on its way must not make it busier (each range it takes
// in changes its own digests, which its peers then compare). Per peer, so
// that a node that missed much (a relayer that crashed while its deltas
// were held up) takes it back from all its peers at once, each range from one.
inline constexpr size_t kMostRangesAskedPerPeer = 64;

// The ranges a node asks its peers for in one interval: at most
// kMostRangesAskedPerPeer of each peer, and each range of one peer only.
class RangeAskBudget {
 public:
  // An answer to `peer`'s digests at ref_ms: ranges asked of another peer in
  // ref_ms's interval, and those beyond the peer's budget, move from *want
  // to *later (their digests come again next time).
  void Limit(int64_t ref_ms, NodeId peer, std::vector<uint32_t>* want,
             std::vector<uint32_t>* later);

 private:
  int64_t ref_ms_ = 0;                 // the interval asked in
  std::map<NodeId, size_t> asked_of_;  // by peer, the ranges asked of it
  std::set<uint32_t> asked_;           // every range asked in it
};

// The reference time of the anti-entropy interval that holds wall_ms.
inline int64_t DigestRefMs(int64_t wall_ms, int64_t interval_ms) {
  return wall_ms - wall_ms % interval_ms;
}

// Every range's version and whether it is quiet (index: the range).
std::vector<Limiter::RangeVersion> AllRangeVersions(Limiter& limiter, int64_t quiet_ms);

// Which ranges' digests this node's peers are owed: a quiet range whose
// version moved since its digest last went out goes to every peer at the
// next interval, once. A peer that was not reached then (its link down, or
// syncing) gets a full sync instead; one that answered `later` gets the
// digest again (LinkSync). So what a node keeps for anti-entropy is one
// version per range, whatever the number of its peers.
class DigestLedger {
 public:
  // The quiet ranges whose version moved since their digests went out, in
  // order (versions: every range's).
  std::vector<uint32_t> Due(std::span<const Limiter::RangeVersion> versions) const;
  // The digests of `ranges` went out at their versions now.
  void Sent(std::span<const uint32_t> ranges, std::span<const Limiter::RangeVersion> versions);

 private:
  // By range, the version whose digest last went out; empty until Sent
  // (every range at KeyRange's first version: it holds nothing).
  std::vector<uint64_t> sent_;
};

// A run [first, end) of sorted ranges that lie in one shard.
struct ShardRun {
  size_t shard = 0;
  size_t first = 0;
  size_t end = 0;
};
std::vector<ShardRun> ShardRuns(std::span<const uint32_t> ranges);

// The digests of one anti-entropy interval, computed once for every link:
// the ranges any link needs (`wanted`, by range), computed one shard at a
// time (Compute each of `runs`, so that a caller may let other work run in
// between); then each link keeps the ranges whose digest holds their state.
struct IntervalDigests {
  explicit IntervalDigests(const std::vector<bool>& wanted);
  // The digests at ref_ms of the run's ranges (Limiter::RangeDigests).
  void Compute(Limiter& limiter, const ShardRun& run, int64_t ref_ms);
  // Drops the ranges that changed since their digest at ref_ms: they wait
  // for the next interval.
  void KeepCurrent(std::vector<uint32_t>* ranges) const;

  std::vector<ShardRun> runs;
  std::vector<uint64_t> digests;  // by range
  std::vector<bool> current;      // by range: its digest holds its state

 private:
  std::vector<uint32_t> ranges_;  // the wanted ranges, in order (runs index it)
};

// Compares a peer's digests of ranges in one shard with this node's: *want
// gets the ranges quiet here as of ref_ms whose digests differ, *later those
// not quiet here as of ref_ms or changed since their digest at ref_ms.
void CompareShardDigests(Limiter& limiter, size_t shard, int64_t quiet_ms, int64_t ref_ms,
                         std::span<const protocol::RangeDigest> digests,
                         std::vector<uint32_t>* want, std::vector<uint32_t>* later);
// The same for digests of any shards (sorted by range), all in one go.
void CompareDigests(Limiter& limiter, int64_t quiet_ms, int64_t ref_ms,
                    std::span<const protocol::RangeDigest> digests, std::vector<uint32_t>* want,
                    std::vector<uint32_t>* later);

}  // namespace tally
