// Share of remaining (escrow): how much of what is left of a limit one node
// may spend in an epoch (ARCHITECTURE.md "The overshoot bound"; bounded counters, Balegas et
// al. 2015).
//
// Near the limit, nodes that each spend all that remains in their view
// overshoot by what the others admit meanwhile. With escrow, time is cut
// into epochs aligned to the wall clock like windows (floor(now / epoch_ms),
// several gossip intervals long). At the start of an epoch a node takes the
// remaining R of its view, less what the others may have spent that it has
// not heard of yet, and spends at most its share of that until the next
// epoch.
//
//  - Shares follow demand: node j weighs its recent demand (its admissions
//    and the requests it was denied, current and previous window; its own
//    denials as its peers have heard of them), but at least a floor
//    F = max(1, all recent demand / 4N) that every member gets, those
//    without demand included. So a node's share of the remainder is its
//    share of the demand, and a node whose demand just started still gets
//    at least about 1/(5N) of it each epoch: it is not starved. (Admissions
//    alone would keep whatever split a key started with: under saturation
//    each node admits what it was allowed. A floor added to every weight
//    gave a quiet node with some demand more than its part: its clients got
//    up to 1.7x what a central limiter gives them under skew.)
//  - Shares are rounded systematically: in an order every node knows alike
//    (the members it knows no id of first, as one block, then by id), each
//    member gets floor(C + u) - floor(C_before + u) of the cumulative shares
//    C, with an offset u in [0, 1) that every node draws alike from the
//    epoch's index. So the allowances of an epoch sum to exactly R, each is
//    the floor or the ceiling of its share, and over epochs each member gets
//    its share whatever its id. (The units the floors left once went to the
//    largest remainders, ties to the lowest id: where shares are below a
//    unit, as quiet nodes' are near the limit, the lowest ids took them
//    every epoch.) A node that knows no other member yet (a new key) takes
//    its share's floor, as every node then does.
//  - An epoch begins at a node's first check of the key in it, which may come
//    well after its start (a quiet node's next request); by then the others
//    have begun spending their allowances of it. So the first merge into a
//    key in an epoch it has not begun keeps the others' counts as they
//    stood at the epoch's start (KeepStart), and Begin weighs those: for
//    what remains, the weights and the counts that the next epoch's unheard
//    spending is reckoned from. (Begun on the view of its first check, a
//    quiet node shared out what the busy node's spending had left of the
//    epoch: its clients got less than their part, and what the others held
//    back for it at the next epoch went unspent.)
//  - Unheard spending: each node computes every node's allowance of the
//    epoch, as they all use the same rule on nearly the same view. At the
//    next epoch's start, what a node was allowed and has not been seen to
//    spend may still be on its way, and is taken off R. So, as long as views
//    are less than an epoch old, the allowances of an epoch sum to at most
//    what truly remained (rounding aside), whatever the delays.
//
// Thread safety: value types; the owning shard's mutex guards them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "node/common/g_counter.h"

namespace tally {

class EscrowEpoch {
 public:
  // True when `index` (floor(now_ms / epoch_ms)) or the window is not this
  // epoch's: the caller then calls Begin.
  bool Stale(int64_t index, int64_t window) const { return index != index_ || window != window_; }

  // Begins epoch `index` of `window`. view_remaining: what the node's view
  // leaves of the limit now; own_current: its own count; self_recent: its
  // demand in the current and previous window (admissions, and denials as
  // its peers have heard of them); remote_current and remote_previous: the
  // others' slots; denied (may be null): what each node was denied in the
  // current and previous window, which weighs as demand too; cluster_size:
  // the members, self included.
  void Begin(int64_t index, int64_t window, uint64_t view_remaining, NodeId self,
             uint32_t own_current, uint64_t self_recent, const GCounter& remote_current,
             const GCounter& remote_previous, const GCounter* denied_current,
             const GCounter* denied_previous, size_t cluster_size);

  // Whether a merge now, in epoch `index` of `window`, is the first since its
  // start: the caller then passes the others' current-window counts, before
  // the merge changes them, to KeepStart.
  bool WantsStart(int64_t index, int64_t window) const {
    return Stale(index, window) && (index != start_index_ || window != start_window_);
  }
  void KeepStart(int64_t index, int64_t window, GCounter remote_current) {
    start_index_ = index;
    start_window_ = window;
    start_current_ = std::move(remote_current);
  }
  // For Begin of epoch `index` of `window`: if a merge kept the others'
  // current-window counts at its start (KeepStart), puts them in
  // *remote_current and returns how much the view's counts have grown since
  // (to be given back to what remains); else changes nothing and returns 0
  // (no merge came since, and the view is as it stood then).
  uint64_t RewindToStart(int64_t index, int64_t window, GCounter* remote_current) const {
    if (index != start_index_ || window != start_window_) return 0;
    const uint64_t grown =
        remote_current->Sum() - std::min(remote_current->Sum(), start_current_.Sum());
    *remote_current = start_current_;
    return grown;
  }

  // Whether `window` follows this epoch's window within its epoch `index`:
  // a bucket's period of slices ended before the epoch did. The caller then
  // calls Continue instead of Begin.
  bool ContinuesInto(int64_t index, int64_t window) const {
    return index == index_ && window == window_ + 1;
  }
  // Goes on counting the epoch in the next window: what each node counted in
  // the window before is its previous count now (own_previous, and
  // remote_previous's slots), so its spending and the others' unheard carry
  // over. (Begun anew, the epoch forgot both, and a coordinated burst on a
  // fresh bucket across a period's end passed 2.5x the limit on 3 nodes.)
  void Continue(int64_t window, uint32_t own_previous, const GCounter& remote_previous);

  // What this node may still spend in the epoch, its count being own_current.
  uint64_t Left(uint32_t own_current) const {
    const int64_t spent = std::max<int64_t>(0, int64_t{own_current} - own_at_start_);
    return allowance_ > static_cast<uint64_t>(spent) ? allowance_ - static_cast<uint64_t>(spent)
                                                     : 0;
  }

  uint64_t allowance() const { return allowance_; }

 private:
  struct Other {
    NodeId node;
    // Its current-window slot when the epoch began, less what moved to its
    // previous window since (Continue): may be negative.
    int64_t count_at_start;
    uint64_t allowance;  // what the rule allows it in the epoch
  };

  int64_t index_ = -1;
  int64_t window_ = -1;
  int64_t own_at_start_ = 0;  // as Other::count_at_start, for this node
  uint64_t allowance_ = 0;
  std::vector<Other> others_;         // the others with admissions, by node
  uint64_t newcomers_allowance_ = 0;  // all members without admissions together
  int64_t start_index_ = -1;          // KeepStart's epoch and window
  int64_t start_window_ = -1;
  GCounter start_current_;
};

}  // namespace tally
