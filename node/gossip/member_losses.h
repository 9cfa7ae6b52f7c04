// MemberLosses: which peers may have lost admissions they kept back from
// this node (gossip delay, node/engine/headroom.h), told to the Limiter so
// that they count as spent (Limiter::NoteDeferralLoss).
//
// A member's link going down without its leaving is the first sign of a
// crash: a loss is noted at once, pending. It is settled by what the
// membership says next about that member:
//  - a newer incarnation (it restarted): crashed, the loss stays;
//  - kAliveBeats more heartbeats of the same incarnation (it was cut off or
//    its link dropped, and it lives): nothing was lost, the loss is
//    forgotten (its kept-back admissions reach this node when it speaks
//    again);
//  - it left: it sent what it kept back before its leave; forgotten.
// A newer incarnation of a member with no pending loss (it crashed and
// restarted while its link was down or never up) is noted then, unless its
// last incarnation was seen leaving.
//
// Thread safety: the gossip thread only.
#pragma once

#include <cstdint>
#include <map>
#include <span>

#include "node/common/node_id.h"
#include "node/engine/limiter.h"
#include "protocol/messages.h"

namespace tally {

class MemberLosses {
 public:
  // Heartbeats of the same incarnation after its link went down that show a
  // member alive. More than one: a heartbeat beaten before a crash may still
  // arrive relayed by another member a membership interval or two later.
  static constexpr uint64_t kAliveBeats = 3;

  explicit MemberLosses(Limiter* limiter) : limiter_(limiter) {}  // not owned

  // The link to the member of `record` (as the membership has it now) went
  // down, not stopped by this node.
  void LinkWentDown(const protocol::MemberRecord& record);
  // Every round: every member's record (left ones too; this node's is
  // skipped by the caller or ignored here by self_id).
  void Follow(std::span<const protocol::MemberRecord> records, NodeId self_id);

  // Losses noted and not settled yet.
  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    uint64_t incarnation = 0;
    uint64_t heartbeat = 0;  // when its link went down
    uint64_t ticket = 0;     // Limiter::NoteDeferralLoss's
  };
  struct Seen {
    uint64_t incarnation = 0;
    bool left = false;
  };
  Limiter* const limiter_;
  std::map<NodeId, Pending> pending_;
  std::map<NodeId, Seen> seen_;  // each member's newest record as of the last Follow
};

}  // namespace tally
