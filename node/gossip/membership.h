// Membership: the members of the cluster as this node sees them, from
// heartbeats that travel with the gossip.
//
// Every member beats (heartbeat + 1, Beat) every membership interval and
// sends its whole table to the peers it links to; a node keeps, for each
// member, the record with the newest (incarnation, heartbeat). So a member's
// beats reach every node that some path of links leads to, not only its
// direct peers: a node cut off from one member still hears of it through the
// others (what SWIM's indirect probes are for).
//
// States are this node's own judgement of how long ago a member's heartbeat
// last advanced here; they are not gossiped, so no node can declare another
// dead for everyone:
//   alive    within suspect_after_ms
//   suspect  no newer heartbeat for suspect_after_ms
//   dead     none for dead_after_ms
//   left     it announced that it leaves (Leave): final for its incarnation
// A restarted member has a newer incarnation (its wall-clock start time) and
// is alive again with its first record. Suspect and dead members stay in the
// table and count in cluster_size (a crash looks like a partition from here,
// and the limit must not grow with it); only a member that left stops counting.
//
// Clock offsets: a member's own record, heard straight from it, carries its
// wall clock when it beat, and it beats right before it sends; so that time
// minus this node's wall clock on arrival is its clock's offset from this
// node's, less the delivery time. The estimate is the highest of the last
// kOffsetSamples (the sample with the quickest delivery). Windows are aligned
// to wall clocks, so the offset is what skews the nodes' windows against
// each other (README: clocks).
//
// Times: now_ms is monotonic (failure detection), wall_ms the wall clock
// (incarnations and lag); both are passed in, so tests control them.
// Thread safety: none; the gossip code guards it with its mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "node/common/node_id.h"
#include "node/common/status.h"
#include "protocol/messages.h"

namespace tally {

class Membership {
 public:
  struct Options {
    protocol::MemberRecord self;  // node_id, address and incarnation; heartbeat 0
    int64_t suspect_after_ms = 1'500;
    int64_t dead_after_ms = 3'000;
  };

  Membership(const Options& options, int64_t now_ms);

  // This node's heartbeat + 1, stamped wall_ms.
  void Beat(int64_t wall_ms);
  // Marks this node left (and beats, so the record is newer than any before).
  void Leave(int64_t wall_ms);
  // Marks another member left and forgotten, as of its newest record here
  // (so that a beat of the same run, or a newer run, is newer and brings it
  // back: it was not gone). InvalidArgument for an id it has no record of
  // and for this node's own; *forgotten false when it had left (or been
  // forgotten) already.
  Status Forget(NodeId member, bool* forgotten);

  static constexpr size_t kOffsetSamples = 8;

  // A member that runs as `incarnation` now while its previous run, as this
  // node knew it, had not left: it was killed or crashed.
  struct Restart {
    NodeId node_id = 0;
    uint64_t incarnation = 0;
  };
  // Takes every record newer than the one this node has (records about this
  // node itself are not taken). now_ms/wall_ms: when they arrived; sender:
  // the member that sent them (0: unknown), whose own record gives its clock
  // offset. *restarts (if not null) gets every member whose record of a run
  // that had not left gave way to a newer incarnation or was forgotten by
  // an operator (Forget, at any node; reported with its own incarnation), and this node itself
  // when a record of its own previous run that had not left arrives (its
  // peers knew it before this start: a wiped data directory is no new node).
  void Merge(std::span<const protocol::MemberRecord> records, int64_t now_ms, int64_t wall_ms,
             NodeId sender = 0, std::vector<Restart>* restarts = nullptr);

  // Every member known, this node included: what a members message carries.
  std::vector<protocol::MemberRecord> Records() const;
  // Every member with its state, by node id.
  std::vector<protocol::MemberStatus> View(int64_t now_ms) const;
  // The members whose state changed since the last call (new ones included).
  std::vector<protocol::MemberStatus> TakeChanges(int64_t now_ms);

  // The members whose clock offset went beyond max_offset_ms (either way) or
  // came back within it since the last call.
  std::vector<protocol::MemberStatus> TakeClockChanges(int64_t max_offset_ms, int64_t now_ms);

  // Members that have not left, this node included.
  size_t cluster_size() const;
  // A record of another member has arrived.
  bool joined() const { return members_.size() > 1; }
  const protocol::MemberRecord& self() const { return members_.at(self_id_).record; }

 private:
  struct Member {
    protocol::MemberRecord record;
    int64_t advanced_ms = 0;  // now_ms when its heartbeat last advanced here
    int64_t lag_ms = 0;
    std::optional<protocol::MemberState> reported;         // by TakeChanges
    std::array<int64_t, kOffsetSamples> offset_samples{};  // a ring, from its own records
    size_t offsets_seen = 0;
    bool clock_off_reported = false;  // by TakeClockChanges: beyond the threshold
  };
  // The estimate from the member's samples; nullopt before the first.
  static std::optional<int64_t> ClockOffsetMs(const Member& member);
  protocol::MemberStatus StatusOf(const Member& member, int64_t now_ms) const;

  const NodeId self_id_;
  const int64_t suspect_after_ms_;
  const int64_t dead_after_ms_;
  std::map<NodeId, Member> members_;
};

}  // namespace tally
