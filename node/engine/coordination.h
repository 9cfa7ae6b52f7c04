// Coordination: what a node may admit beyond what its view of the cluster
// allows, and how soon its admissions must reach the peers. The shard's check
// path decides by the pure rules of decide.h, then calls Counter, Bucket or
// Log here once. The log's admissions go every round; it keeps to its share
// of what remains (below) in every mode but plain gossip, with equal shares.
//
//  - Escrow (Settings::escrow_epoch_ms > 0, node/engine/escrow.h): near a
//    limit, this node spends at most its demand-weighted share per epoch of
//    what remains. The cap is lifted on a key idle in its view (no node's
//    admission in the current or previous window; a bucket: full, no recent
//    slices), so that a request a central limiter would admit there is
//    admitted whatever its cost: a burst of such requests on a fresh key at
//    every node at once may pass the limit by the first request at each
//    node, larger than its share; every later one is escrowed.
//  - Partition share (Settings::partition_share, counting keys): while some
//    peers cannot be reached, this node keeps its own admissions to its equal
//    share of the limit.
//  - Share of what remains (Settings::share_wait_ms > 0, the default mode of
//    a cluster without escrow): what this node admitted on a key that its
//    peers may not have heard of (not sent yet, or sent less than
//    Settings::delivery_ms ago) stays within its share of what its view
//    leaves of the limit after the admission. While no node's view has had
//    room for all its requests lately (none heard of in the window or the
//    one before), shares are equal, 1/N (rounded up once a unit or more;
//    N: the members it reaches, itself included; cut off from all, it
//    enforces the limit alone). Once some has (the key is rationed), shares
//    follow demand: each member weighs its heard demand d (what it admitted
//    and what its view had no room for, as every node has heard of them:
//    HeardDemand) plus a floor F = max(1, D / 4N) that every member gets
//    (D: all members' demand); a share is remaining x (d + F) / (D + N F),
//    rounded down, and a node whose demand just started gets at least
//    1/(5N) until its peers hear of it.
//    Since every node weighs the same heard figures, the shares add up to
//    what remains (around a key's first heard denial, for about a delivery
//    time, some nodes may weigh while others still share equally, and the
//    shares add up to more), and with views alike all that the nodes admit
//    unheard together stays within it, so nodes admitting at once (a coordinated
//    burst on a fresh key) do not pass the limit together (the demarcation
//    rule; Barbara and Garcia-Molina 1994), while a node with most of the
//    demand gets most of what frees up, as a central limiter gives its
//    clients. Once what is unheard reaches an eighth of the share (near a
//    limit: the first admission), the node asks for an early gossip round
//    (Settings::round_wanted), so that a steady stream of requests rarely
//    meets the share at all. A request beyond it waits share_wait_ms (a
//    gossip interval and delivery_ms: by then what this node held back has
//    been sent and has arrived, and the request passes if nothing else
//    came). A request when nothing of this node's is unheard passes
//    whatever its share, as far as the view allows: otherwise a request
//    larger than a share would never pass. While the key is rationed, it
//    passes no more often than the node's part of what frees up accrues its
//    cost (CapToShare: its share of what remains per half share_wait_ms on a
//    counting key, its weight's part of the refill on a bucket), so that
//    nodes whose shares are below one request take turns by weight, as a
//    central limiter serves their clients. So near the limit each node may
//    pass the bound by one request (N - 1 units beyond it for unit costs,
//    once views agree). Far from a limit a share is large and nothing waits.
//    Token buckets weigh demand alike, per period of their slices (a quarter
//    window) instead of per window: each node's cost in the live slices and
//    its denials.
//  - Gossip delay (node/engine/headroom.h): an admission within a much
//    smaller share of what remains may wait before it is gossiped; one beyond
//    goes at the next round. With escrow every admission goes at once: escrow
//    needs views less than an epoch old. What a member may have kept back
//    and lost (DeferralLosses) counts as spent: a check decides by the limit
//    less a headroom share of it per loss (LimitAfterLosses).
//
// A cap makes an admission wait (allowed false, retry_after_ms until the cap
// lifts); it never changes `remaining`, which stays what this node's view
// leaves of the cluster-wide limit.
//
// Thread safety: the settings are set once, before any use, and read only;
// the cluster view is atomic. The entries passed in belong to the caller's
// shard, whose mutex the caller holds.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "node/common/limit.h"
#include "node/common/node_id.h"
#include "node/engine/headroom.h"
#include "node/engine/key_state.h"

namespace tally {

class Coordination {
 public:
  struct Settings {
    NodeId self = 0;
    int64_t escrow_epoch_ms = 0;  // 0: no escrow
    bool partition_share = false;
    int64_t gossip_max_delay_ms = 0;  // 0: every admission at the next round
    int64_t share_wait_ms = 0;        // 0: no share of what remains (plain gossip)
    int64_t delivery_ms = 0;          // what was sent this long ago may be on its way
    // The Limiter's view of the cluster (SetClusterView): its members, this
    // node included, and how many of the others no link reaches. Not owned.
    const std::atomic<size_t>* cluster_size = nullptr;
    const std::atomic<size_t>* unreachable_peers = nullptr;
    // Asks for an early gossip round (Limiter::SetRoundWanted); not owned,
    // may be null or empty.
    const std::function<void()>* round_wanted = nullptr;
    // Losses of what members kept back (Limiter::SetDeferralLosses); not
    // owned, may be null (none).
    const DeferralLosses* deferral_losses = nullptr;
  };

  Coordination() = default;
  explicit Coordination(const Settings& settings) : settings_(settings) {}

  // The limit a check of `cost` decides by: the spec's, less a headroom
  // share of it (what a member may keep back, node/engine/headroom.h) for
  // each loss of what members kept back seen since counted_since_ms (the
  // start of the oldest window the check counts: a loss seen later may hold
  // admissions that count in it). Never below cost, up to the spec's limit:
  // a request that a central limiter admits on an idle key still passes.
  uint64_t LimitAfterLosses(const LimitSpec& spec, uint64_t cost, int64_t counted_since_ms) const;

  // A counting key (fixed window, sliding counter) as its check sees it:
  // the window and how far into it, the cluster-wide counts in this node's
  // view, an upper bound of what this node would have kept to itself (not
  // gossiped) after admitting the request, what of its admissions its
  // peers may not have heard of now (exact, or an upper bound), and the
  // demand on the key as the nodes have heard of it.
  struct CounterCheck {
    const LimitSpec& spec;
    uint64_t cost;
    int64_t now_ms;
    int64_t window_index;
    uint64_t elapsed_ms;
    uint64_t current;
    uint64_t previous;
    uint64_t unsent_after;
    uint64_t unheard_before;
    HeardDemand demand;
  };
  // Caps *decision (the pure rule's). `entry` is null for a key this node
  // does not hold yet: escrow state for it is made in *fresh, for the caller
  // to keep with the entry it creates if the request is admitted. Returns how
  // long the admission, if any, may wait before it is gossiped (0: the next
  // round).
  int64_t Counter(const CounterCheck& check, CounterEntry* entry,
                  std::unique_ptr<RemoteCounts>* fresh, Decision* decision) const;

  // Before a merge changes the peers' counts of a counting key (`remote`,
  // its entry in window `window_index`) or a token bucket (of `window_ms`):
  // with escrow, the first merge into an epoch the key has not begun keeps
  // them as they stood at its start (node/engine/escrow.h). Without, it
  // reads nothing of the key (a merge's memory is what it costs).
  void BeforeMerge(RemoteCounts& remote, int64_t window_index, int64_t now_ms) const {
    if (settings_.escrow_epoch_ms > 0 && remote.epoch) KeepEpochStart(remote, window_index, now_ms);
  }
  void BeforeMerge(BucketEntry& entry, uint64_t window_ms, int64_t now_ms) const {
    if (settings_.escrow_epoch_ms > 0 && entry.epoch) KeepEpochStart(entry, window_ms, now_ms);
  }

  // A token bucket key: `state` the slices decided by (the entry's, or an
  // empty one of the current base when entry is null; *fresh as above).
  struct BucketCheck {
    const LimitSpec& spec;
    uint64_t cost;
    int64_t now_ms;
    int64_t slice;
    const BucketSlices& state;
    uint64_t unsent_after;
    uint64_t unheard_before;
    HeardDemand demand;
  };
  int64_t Bucket(const BucketCheck& check, BucketEntry* entry, std::unique_ptr<EscrowEpoch>* fresh,
                 Decision* decision) const;

  // A sliding-log key: what of this node's admissions its peers may not
  // have heard of (unheard_before) stays within its share of what its view
  // leaves of the limit, in every mode but plain gossip (escrow's epochs
  // count windows, and a log has none: it shares what remains instead).
  // turn_at_ms: the entry's (RemoteCounts::turn_at_ms), null for a key this
  // node does not hold yet. Its admissions go at the next round.
  struct LogCheck {
    uint64_t cost;
    int64_t now_ms;
    uint64_t unheard_before;
  };
  void Log(const LogCheck& check, uint32_t* turn_at_ms, Decision* decision) const;

  NodeId self() const { return settings_.self; }
  // Whether the caller should count exactly what waits to be sent on a key
  // whose admission must go at the next round (gossip_delay_ms 0): the share
  // of what remains is held, and such a key is near enough for it to matter.
  bool CountsUnsent() const { return settings_.share_wait_ms > 0 && !escrowed(); }
  // Whether shares of what remains weigh demand (HeardDemand) here: held,
  // and with peers.
  bool WeighsDemand() const { return CountsUnsent() && members() > 1; }
  // Whether the caller should count a denial (CountDenied) and send it,
  // given whether the view had room: the shares weigh what the view had no
  // room for; escrow weighs every denial but one that can never pass (its
  // epochs ration near a limit anyway, and a node denied by its allowance
  // should get more of the next).
  bool CountsDenial(const Decision& decision, bool view_had_room) const {
    if (decision.allowed || decision.never_allowed) return false;
    return escrowed() || (WeighsDemand() && !view_had_room);
  }

  // How long an admission within this node's headroom share may wait
  // before it is gossiped, on keys of this algorithm and window.
  int64_t MaxDeferralMs(Algorithm algorithm, uint64_t window_ms) const {
    return DeferralMs(algorithm, window_ms, settings_.gossip_max_delay_ms);
  }
  // How long what this node sent may be on its way to the peers.
  int64_t delivery_ms() const { return settings_.delivery_ms; }
  // The members (SetClusterView), this node included.
  size_t members() const { return settings_.cluster_size->load(std::memory_order_relaxed); }

 private:
  bool escrowed() const { return settings_.escrow_epoch_ms > 0 && members() > 1; }
  // The gossip delay of an admission that leaves unsent_after unsent and
  // `remaining` in the view.
  int64_t GossipDelayMs(const LimitSpec& spec, uint64_t unsent_after, uint64_t remaining) const;
  // Asks for an early gossip round (Settings::round_wanted), if anyone listens.
  void WantRound() const {
    if (settings_.round_wanted != nullptr && *settings_.round_wanted) (*settings_.round_wanted)();
  }
  // BeforeMerge's work, on a key with an epoch.
  void KeepEpochStart(RemoteCounts& remote, int64_t window_index, int64_t now_ms) const;
  void KeepEpochStart(BucketEntry& entry, uint64_t window_ms, int64_t now_ms) const;
  // This node's denials (current and previous window or period) as its
  // peers have heard of them, for escrow's weights: as it sent them last
  // (every admission goes at the next round, its denials with it) once that
  // is a delivery time ago (sent_at_ms, the wall clock's low 32 bits), else
  // as it sent them the time before. (Always the time before, a node denied
  // all of an epoch, which sends only when it admits, weighed its denials a
  // send or two behind its peers: its share came out smaller than they
  // reckoned it, and what they held back for it was lost.)
  uint64_t OwnDeniedHeard(const DeniedCounts& denied, uint32_t sent_at_ms, int64_t now_ms) const;
  // Keeps what is unheard within this node's share of what remains.
  // turn_at_ms: where the key keeps when this node last took a turn (the
  // wall clock's ms, low 32 bits, | 1; 0: never), or null where it keeps
  // nothing yet. refill: a token bucket's spec (it refills at limit per
  // window), null for a counting key.
  struct ShareCheck {
    uint64_t cost;
    uint64_t unheard_before;
    const HeardDemand& demand;
    int64_t now_ms;
    uint32_t* turn_at_ms;
    const LimitSpec* refill;
  };
  void CapToShare(const ShareCheck& check, Decision* decision) const;

  Settings settings_;
};

}  // namespace tally
