// MemberLosses: which members may have lost admissions they kept back from
// their peers (gossip delay, node/engine/headroom.h), told to the Limiter
// so that they count as spent (Limiter::SetDeferralLosses).
//
// Two kinds:
//  - Pending, this node's own suspicion. A member's link going down without
//    its leaving is the first sign of a crash: a loss is counted at once. It
//    is settled by what is heard next of that member: a newer incarnation
//    (it restarted) makes it a crash loss, below; a new connection to or
//    from the same run (Alive: it was cut off or its link dropped, and it
//    lives) or its leave (it sent what it kept back first) mean nothing was
//    lost, and it is forgotten. Only a new connection counts: a message of
//    that run relayed by others may have left it before it crashed.
//  - Crash losses (node/common/crash_loss.h), replicated state: a member
//    restarted without its previous run having left (Membership::Merge says
//    so: a peer's record replaced by a newer incarnation, or a record of this
//    node's own previous run that had not left, which is how a node whose
//    data directory was wiped learns it crashed), or this node's data
//    directory says its last run did not stop (Start). They are stored with
//    the node's data (the `changed` callback), sent with every membership
//    table and merged from the peers' tables, so that every node, the
//    restarted one included, counts the same losses: a restarting node hears
//    its peers' tables before their full syncs, which it waits for before it
//    serves. A node id nobody has a record of (a new member, a memory-only
//    node with a random id) has lost nothing.
// A crash loss is kept for two of the longest windows (kKeepMs), at most
// kMaxCrashLosses (the oldest go first).
//
// Times: wall_ms is the wall clock (losses are compared across nodes).
// Thread safety: the gossip thread only (Start before it runs).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "node/common/crash_loss.h"
#include "node/common/limit.h"
#include "node/common/node_id.h"
#include "node/engine/limiter.h"
#include "protocol/messages.h"

namespace tally {

class MemberLosses {
 public:
  // How long a crash loss is kept: the sliding counter counts a window and
  // the one before, of at most kMaxWindowMs.
  static constexpr int64_t kKeepMs = 2 * static_cast<int64_t>(kMaxWindowMs);

  using Changed = std::function<void(std::span<const CrashLoss>)>;
  // limiter: not owned. changed (may be empty): called with every crash loss
  // known, whenever they change, to store them.
  MemberLosses(Limiter* limiter, Changed changed)
      : limiter_(limiter), changed_(std::move(changed)) {}

  // Before any other call: the losses this node stored, and whether its last
  // run did not stop cleanly (then this run, `incarnation`, follows a crash).
  void Start(std::span<const CrashLoss> stored, NodeId self_id, uint64_t incarnation, bool crashed,
             int64_t wall_ms);
  // The link to the member of `record` (as the membership has it now) went
  // down, not stopped by this node; it reached the member's run
  // `link_incarnation` (its hello's; 0: not said, the record's). A run
  // the membership already knows to have been followed by a newer one
  // has been counted (Restarted).
  void LinkWentDown(const protocol::MemberRecord& record, uint64_t link_incarnation,
                    int64_t wall_ms);
  // A connection to or from `node`'s run `incarnation` has just proven the
  // secret (its hello said that run): a loss noted for that run is settled.
  void Alive(NodeId node, uint64_t incarnation);
  // `node` runs as `incarnation` now, and its previous run did not leave.
  void Restarted(NodeId node, uint64_t incarnation, int64_t wall_ms);
  // A peer's crash losses (from its membership messages).
  void Merge(std::span<const CrashLoss> losses, int64_t wall_ms);
  // Every round: every member's record (left ones too; this node's is
  // ignored by self_id). Settles the pending losses of members that left,
  // and lets old crash losses go.
  void Follow(std::span<const protocol::MemberRecord> records, NodeId self_id, int64_t wall_ms);

  // The crash losses, by (node_id, incarnation): what a membership table carries.
  const std::vector<CrashLoss>& crash_losses() const { return crash_losses_; }
  // Losses noted and not settled yet.
  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    uint64_t incarnation = 0;
    int64_t at_ms = 0;  // wall clock, when its link went down
  };
  // Adds or merges one crash loss (the earliest at_ms); true if that changed anything.
  bool Add(const CrashLoss& loss, int64_t wall_ms);
  // Tells the Limiter every loss counted, and changed_ the crash losses if they changed.
  void Publish(bool crash_losses_changed);

  Limiter* const limiter_;
  const Changed changed_;
  std::map<NodeId, Pending> pending_;
  std::vector<CrashLoss> crash_losses_;  // sorted by (node_id, incarnation)
};

}  // namespace tally
