#include "node/engine/coordination.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "node/engine/decide.h"
#include "node/engine/escrow.h"
#include "node/engine/headroom.h"

namespace tally {
namespace {

// A node's cost in `period` of a bucket's slices, and in the period before.
std::pair<uint64_t, uint64_t> PeriodCosts(const BucketSlices& state, const NodeSlices& node,
                                          int64_t period) {
  const int64_t start = period * kBucketSlicesPerPeriod;
  return {BucketCostIn(node, state.base_slice, start, INT64_MAX),
          BucketCostIn(node, state.base_slice, start - kBucketSlicesPerPeriod, start)};
}

// The other nodes' costs in `period` (current) and the period before (previous).
WindowCounts OthersCosts(const BucketSlices& state, NodeId self, int64_t period) {
  WindowCounts costs;
  for (const NodeSlices& node : state.nodes) {
    if (node.node == self) continue;
    const auto [current, previous] = PeriodCosts(state, node, period);
    costs.current.MergeSlot(node.node, current);
    costs.previous.MergeSlot(node.node, previous);
  }
  return costs;
}

// Caps an allowed decision by what this node may still spend (of its escrow
// share, or of its partition share): beyond it the request waits wait_ms,
// and nothing is taken from what remains.
void Cap(uint64_t cap, uint64_t cost, uint64_t wait_ms, Decision* decision) {
  if (!decision->allowed) return;
  const uint64_t probe = cost == 0 ? 1 : cost;
  if (probe <= cap) return;
  decision->allowed = false;
  decision->remaining += cost;
  decision->retry_after_ms = std::max<uint64_t>(wait_ms, 1);
}

// What is unheard asks for an early gossip round once it reaches this part
// of the node's share: near a limit, where a share is a few units, that is
// from the first admission on, so that the node's next request rarely finds
// the last one unheard (a request beyond the share waits). Far from a limit a
// share is large and nothing is asked.
constexpr uint64_t kEarlyRoundPart = 8;

}  // namespace

int64_t Coordination::GossipDelayMs(const LimitSpec& spec, uint64_t unsent_after,
                                    uint64_t remaining) const {
  if (escrowed() || OverHeadroomShare(unsent_after, remaining, members())) return 0;
  return MaxDeferralMs(spec.algorithm, spec.window_ms);
}

uint64_t Coordination::LimitAfterLosses(const LimitSpec& spec, uint64_t cost,
                                        int64_t counted_since_ms) const {
  // Nothing is kept back without a gossip delay, and escrow has none.
  if (settings_.deferral_losses == nullptr || settings_.gossip_max_delay_ms == 0 ||
      settings_.escrow_epoch_ms > 0) {
    return spec.limit;
  }
  // Usually none: the division below is left to checks that count losses.
  const size_t losses = settings_.deferral_losses->CountSince(counted_since_ms);
  if (losses == 0) return spec.limit;
  const uint64_t share = HeadroomShare(spec.limit, members());
  const uint64_t lost = std::min(spec.limit, share * losses);
  return std::max(spec.limit - lost, std::min(cost, spec.limit));
}

void Coordination::CapToShare(const ShareCheck& check, Decision* decision) const {
  if (check.cost == 0 || !decision->allowed) return;  // a peek takes nothing
  // Shared with the members this node's admissions reach: while cut off from
  // some, each side enforces the limit on its own (the partition modes).
  const size_t unreachable = settings_.unreachable_peers->load(std::memory_order_relaxed);
  const size_t members = this->members() - std::min(unreachable, this->members() - 1);
  if (members <= 1) return;
  // Rationed (some node's view had no room lately): weighed by heard demand,
  // with every member's floor, rounded down. Otherwise equal: remaining /
  // members (exact in doubles: integers below 2^53), rounded up once it is a
  // unit or more. Rounded up, the shares add up to at most members - 1 units
  // beyond what remains, as many as the nodes may pass beyond their shares
  // anyway (a request with nothing unheard, below); rounded down, a share of
  // a few units below the limit made a node's second request within an early
  // round wait, where a central limiter admits it. Below a unit, as under
  // overload, a share stays 0: a node passes only with nothing unheard.
  const bool rationed = check.demand.denied > 0;
  const HeardDemand demand = rationed ? check.demand : HeardDemand();
  const double floor = std::max(1.0, demand.all / static_cast<double>(4 * members));
  const double own_part = demand.own + floor;
  const double all_parts = demand.all + static_cast<double>(members) * floor;
  const double exact_share = static_cast<double>(decision->remaining) * own_part / all_parts;
  const auto share =
      static_cast<uint64_t>(rationed || exact_share < 1 ? exact_share : std::ceil(exact_share));
  // Below 2^35 (costs and counts are at most kMaxLimit, 10^9; what is
  // unheard at most three windows of the node's own count): no overflow.
  const uint64_t unheard_after = check.unheard_before + check.cost;
  const auto now32 = static_cast<uint32_t>(check.now_ms) | 1;  // 0: never
  // On a rationed bucket a pass within the share is a turn too (below).
  const auto within_share = [&] {
    if (rationed && check.refill != nullptr && check.turn_at_ms != nullptr) {
      *check.turn_at_ms = now32;
    }
  };
  if (unheard_after * kEarlyRoundPart <= share) return within_share();
  WantRound();
  if (unheard_after <= share) return within_share();
  // Beyond the share: with nothing unheard, the request passes; rationed, no
  // sooner after this node's last turn than its part of what frees up
  // accrues the cost, so that nodes whose shares are below a request take
  // turns by their weight, as a central limiter gives each node's clients
  // their part of what frees up. What frees up follows the algorithm:
  //  - a counting window frees what remains as it rolls on: a turn comes
  //    when the node's share of what remained accrues the cost, a share per
  //    half share_wait_ms (about how often a node that keeps asking renews
  //    its share: an early round and delivery, or a round);
  //  - a bucket refills at limit per window: a turn comes when the node's
  //    weight's part of the refill accrues the cost, counted from its last
  //    pass within its share or beyond (otherwise a node that passes within
  //    its share between turns takes more than its part), at most two
  //    windows apart (what its demand remembers).
  // The first time on a key: at once.
  const auto wait_ms = static_cast<uint64_t>(settings_.share_wait_ms);
  uint64_t turn_in_ms = 0;
  if (rationed && check.turn_at_ms != nullptr && *check.turn_at_ms != 0) {
    double accrual_ms = 0;
    if (check.refill == nullptr) {
      const double share_before =
          static_cast<double>(decision->remaining + check.cost) * own_part / all_parts;
      accrual_ms =
          static_cast<double>(check.cost) * static_cast<double>(wait_ms) / 2 / share_before;
    } else if (check.refill->limit > 0) {
      const auto window_ms = static_cast<double>(check.refill->window_ms);
      accrual_ms = std::min(static_cast<double>(check.cost) * window_ms * all_parts /
                                (static_cast<double>(check.refill->limit) * own_part),
                            2 * window_ms);
    }
    const auto turn_ms = static_cast<uint64_t>(std::ceil(std::min(accrual_ms, double{INT32_MAX})));
    const uint32_t since_ms = now32 - *check.turn_at_ms;
    turn_in_ms = since_ms >= turn_ms ? 0 : turn_ms - since_ms;
  }
  if (check.unheard_before == 0 && turn_in_ms == 0) {
    if (check.turn_at_ms != nullptr) *check.turn_at_ms = now32;
    return;
  }
  Cap(0, check.cost, std::max(check.unheard_before > 0 ? wait_ms : 0, turn_in_ms), decision);
}

uint64_t Coordination::OwnDeniedHeard(const DeniedCounts& denied, uint32_t sent_at_ms,
                                      int64_t now_ms) const {
  const NodeId self = settings_.self;
  if (InFlight(sent_at_ms, now_ms, settings_.delivery_ms)) {
    return denied.current.Get(self) + denied.previous.Get(self);
  }
  return std::max<uint64_t>(denied.current.Get(self), denied.sent_current) +
         std::max<uint64_t>(denied.previous.Get(self), denied.sent_previous);
}

int64_t Coordination::Counter(const CounterCheck& check, CounterEntry* entry,
                              std::unique_ptr<RemoteCounts>* fresh, Decision* decision) const {
  const LimitSpec& spec = check.spec;
  const size_t members = this->members();
  const uint32_t own_current = entry ? entry->own_current : 0;
  const uint32_t own_previous = entry ? entry->own_previous : 0;
  // Escrow: spend at most this node's share of what remained at the epoch's
  // start; but not on a key idle in this node's view, so that a request a
  // central limiter admits at once (whatever its cost) is admitted.
  const bool idle = check.current == 0 && check.previous == 0;
  if (escrowed()) {
    if (!entry) *fresh = std::make_unique<RemoteCounts>();
    RemoteCounts& remote = entry ? entry->peers.MakeFull() : **fresh;
    if (!remote.epoch) remote.epoch = std::make_unique<EscrowEpoch>();
    EscrowEpoch& epoch = *remote.epoch;
    const int64_t epoch_ms = settings_.escrow_epoch_ms;
    const int64_t epoch_index = check.now_ms / epoch_ms;
    if (epoch.Stale(epoch_index, check.window_index)) {
      // What the view leaves at the epoch's end: the sliding counter's previous
      // window weighs less by then, and that room is this epoch's to share.
      const int64_t window_start_ms = check.window_index * static_cast<int64_t>(spec.window_ms);
      const auto epoch_end_elapsed_ms =
          static_cast<uint64_t>(std::min<int64_t>((epoch_index + 1) * epoch_ms - window_start_ms,
                                                  static_cast<int64_t>(spec.window_ms) - 1));
      // The others' slots as the epoch weighs them: their current counts as
      // they stood at its start, if merges have moved them since.
      WindowCounts peers;
      remote.peers.ExportTo(&peers);
      const uint64_t merged_since =
          epoch.RewindToStart(epoch_index, check.window_index, &peers.current);
      const uint64_t current = check.current - std::min(check.current, merged_since);
      const uint64_t view_remaining =
          spec.algorithm == Algorithm::kFixedWindow
              ? DecideFixedWindow(spec, current, check.elapsed_ms, 0).remaining
              : DecideSlidingCounter(spec, current, check.previous, epoch_end_elapsed_ms, 0)
                    .remaining;
      // Demand weighs: admissions, and denials as the peers have heard of them.
      const DeniedCounts* denied = remote.denied.get();
      const uint64_t own_denied =
          denied ? OwnDeniedHeard(*denied, remote.sent_at_ms, check.now_ms) : 0;
      epoch.Begin(epoch_index, check.window_index, view_remaining, settings_.self, own_current,
                  uint64_t{own_current} + own_previous + own_denied, peers.current, peers.previous,
                  denied ? &denied->current : nullptr, denied ? &denied->previous : nullptr,
                  members);
    }
    const auto epoch_left_ms = static_cast<uint64_t>((epoch_index + 1) * epoch_ms - check.now_ms);
    if (!idle) Cap(epoch.Left(own_current), check.cost, epoch_left_ms, decision);
  }
  // Cut off from some peers, in the share mode: keep to this node's equal
  // share of the limit, counting only its own admissions.
  if (settings_.partition_share && members > 1 &&
      settings_.unreachable_peers->load(std::memory_order_relaxed) > 0) {
    LimitSpec share = spec;
    share.limit = spec.limit / members;
    const Decision own =
        spec.algorithm == Algorithm::kFixedWindow
            ? DecideFixedWindow(share, own_current, check.elapsed_ms, check.cost)
            : DecideSlidingCounter(share, own_current, own_previous, check.elapsed_ms, check.cost);
    Cap(own.remaining + (own.allowed ? check.cost : 0), check.cost, own.retry_after_ms, decision);
  }
  if (CountsUnsent()) {
    CapToShare({check.cost, check.unheard_before, check.demand, check.now_ms,
                entry && entry->peers.full() ? &entry->peers.full()->turn_at_ms : nullptr, nullptr},
               decision);
  }
  return GossipDelayMs(spec, check.unsent_after, decision->remaining);
}

void Coordination::KeepEpochStart(RemoteCounts& remote, int64_t window_index,
                                  int64_t now_ms) const {
  const int64_t epoch_index = now_ms / settings_.escrow_epoch_ms;
  if (!remote.epoch->WantsStart(epoch_index, window_index)) return;
  WindowCounts peers;
  remote.peers.ExportTo(&peers);
  remote.epoch->KeepStart(epoch_index, window_index, std::move(peers.current));
}

void Coordination::KeepEpochStart(BucketEntry& entry, uint64_t window_ms, int64_t now_ms) const {
  const int64_t epoch_index = now_ms / settings_.escrow_epoch_ms;
  const int64_t period = BucketSliceAt(window_ms, now_ms) / kBucketSlicesPerPeriod;
  if (!entry.epoch->WantsStart(epoch_index, period)) return;
  entry.epoch->KeepStart(epoch_index, period,
                         std::move(OthersCosts(entry.state, settings_.self, period).current));
}

int64_t Coordination::Bucket(const BucketCheck& check, BucketEntry* entry,
                             std::unique_ptr<EscrowEpoch>* fresh, Decision* decision) const {
  const LimitSpec& spec = check.spec;
  // Escrow: spend at most this node's share of what the view leaves at the
  // epoch's end; the counts it compares are each node's cost in the current
  // period of slices (and, for the weights, the previous one). Not on a full
  // bucket no node has drawn from lately (idle, as for the counters).
  const bool idle = check.state.nodes.empty() && check.state.base_debt == 0;
  if (escrowed()) {
    if (entry && !entry->epoch) entry->epoch = std::make_unique<EscrowEpoch>();
    if (!entry) *fresh = std::make_unique<EscrowEpoch>();
    EscrowEpoch& epoch = entry ? *entry->epoch : **fresh;
    const int64_t period = check.slice / kBucketSlicesPerPeriod;
    uint64_t own_current = 0;
    uint64_t own_previous = 0;
    for (const NodeSlices& node : check.state.nodes) {
      if (node.node == settings_.self)
        std::tie(own_current, own_previous) = PeriodCosts(check.state, node, period);
    }
    const auto own_current32 = static_cast<uint32_t>(std::min<uint64_t>(own_current, UINT32_MAX));
    const int64_t epoch_index = check.now_ms / settings_.escrow_epoch_ms;
    const int64_t epoch_end_ms = (epoch_index + 1) * settings_.escrow_epoch_ms;
    if (epoch.ContinuesInto(epoch_index, period)) {
      epoch.Continue(period, static_cast<uint32_t>(std::min<uint64_t>(own_previous, UINT32_MAX)),
                     OthersCosts(check.state, settings_.self, period).previous);
    } else if (epoch.Stale(epoch_index, period)) {
      // What the view leaves at the epoch's end: the refill until then is
      // this epoch's to share; and what the others drew of it since its
      // start, if merges brought that before this check (as for counters).
      WindowCounts others = OthersCosts(check.state, settings_.self, period);
      const uint64_t heard_at_end = entry ? HeardDebt(*entry, spec.limit, epoch_end_ms) : 0;
      const uint64_t drawn_since = epoch.RewindToStart(epoch_index, period, &others.current);
      const uint64_t view_remaining =
          std::min(spec.limit,
                   DecideTokenBucket(spec, &check.state, heard_at_end, epoch_end_ms, 0).remaining +
                       drawn_since);
      const DeniedCounts* denied = entry ? entry->denied.get() : nullptr;
      const uint64_t own_denied =
          denied ? OwnDeniedHeard(*denied, entry->sent_at_ms, check.now_ms) : 0;
      epoch.Begin(epoch_index, period, view_remaining, settings_.self, own_current32,
                  own_current + own_previous + own_denied, others.current, others.previous,
                  denied ? &denied->current : nullptr, denied ? &denied->previous : nullptr,
                  members());
    }
    if (!idle) {
      Cap(epoch.Left(own_current32), check.cost, static_cast<uint64_t>(epoch_end_ms - check.now_ms),
          decision);
    }
  }
  if (CountsUnsent()) {
    CapToShare({check.cost, check.unheard_before, check.demand, check.now_ms,
                entry ? &entry->turn_at_ms : nullptr, &spec},
               decision);
  }
  return GossipDelayMs(spec, check.unsent_after, decision->remaining);
}

void Coordination::Log(const LogCheck& check, uint32_t* turn_at_ms, Decision* decision) const {
  if (settings_.share_wait_ms <= 0) return;
  const HeardDemand equal;  // the log weighs no demand: its shares stay equal
  CapToShare({check.cost, check.unheard_before, equal, check.now_ms, turn_at_ms, nullptr},
             decision);
}

}  // namespace tally
