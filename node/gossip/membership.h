// Membership: the members of the cluster as this node sees them, kept by
// SWIM's dissemination (Das, Gupta and Motivala, 2002): records of what
// changed ride on the probes (node/gossip/prober.h) that every node sends
// anyway, so that what a node spends at rest does not grow with the cluster.
//
// A record is a member's (incarnation, version) with a state: alive,
// suspect or dead, or left. A node keeps for each member the newest record:
// a later incarnation (a restart: its wall-clock start time), or in one
// incarnation a later version, or at one version the graver state (alive <
// suspect < dead < left < forgotten). Only the member itself raises its
// version: when it hears that it is suspected or dead (it refutes), or when
// it leaves. So a suspicion spreads until the member answers it, and its
// answer overrides the suspicion everywhere.
//
// States as this node sees them:
//   alive    no node suspects this version of it
//   suspect  a probe of it went unanswered (here, or at a node whose record
//            of it came here); counts down from when this node heard of it
//   dead     suspect for suspicion_ms without refuting (here, or at a node
//            whose record came here)
//   left     it announced that it leaves (Leave): final for its incarnation
// Suspect and dead members stay in the table and count in cluster_size (a
// crash looks like a partition from here, and the limit must not grow with
// it); only a member that left stops counting.
//
// Dissemination: every record that is newer here than before (a suspicion,
// a death, a refutation, a leave) is queued to be sent on, and each goes
// with up to TakeUpdates' max per message, kTransmitFactor x
// ceil(log2(members + 1)) times; then SWIM's epidemic has reached every
// member with high probability. Records of members merely added (from a
// table after a hello) are not queued: every member sends its own table to
// every member it links to.
//
// Clock offsets: a message straight from a member carries its wall clock
// when it sent it (HeardFrom); that time minus this node's wall clock on
// arrival is its clock's offset from this node's, less the delivery time.
// The estimate is the highest of the last kOffsetSamples (the quickest
// delivery). Windows are aligned to wall clocks, so the offset is what
// skews the nodes' windows against each other (README: clocks).
//
// Times: now_ms is monotonic (suspicions), wall_ms the wall clock
// (incarnations and lag); both are passed in, so tests control them.
// Thread safety: none; the gossip code guards it with its mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
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
    protocol::MemberRecord self;  // node_id, address and incarnation; version 0
    // A suspect member that does not refute within this is dead.
    int64_t suspicion_ms = 1'500;
  };

  Membership(const Options& options, int64_t now_ms);

  // Marks this node left (version + 1, stamped wall_ms), to be sent on.
  void Leave(int64_t wall_ms);
  // Marks another member left and forgotten, as of its newest record here
  // (so that a refutation by the same run, or a newer run, is newer and
  // brings it back: it was not gone). InvalidArgument for an id it has no
  // record of and for this node's own; *forgotten false when it had left
  // (or been forgotten) already.
  Status Forget(NodeId member, bool* forgotten);

  static constexpr size_t kOffsetSamples = 8;
  static constexpr int kTransmitFactor = 3;

  // A member that runs as `incarnation` now while its previous run, as this
  // node knew it, had not left: it was killed or crashed.
  struct Restart {
    NodeId node_id = 0;
    uint64_t incarnation = 0;
  };
  // Takes every record newer than the one this node has. A record of this
  // node's own run that suspects it, judges it dead or forgot it is refuted:
  // this node's version becomes that record's + 1 (stamped wall_ms), to be
  // sent on; returns true then. *restarts (if not null) gets every member
  // whose record of a run that had not left gave way to a newer incarnation
  // or was forgotten by an operator (Forget, at any node; reported with its
  // own incarnation), and this node itself when a record of its own previous
  // run that had not left first arrives (its peers knew it before this start:
  // a wiped data directory is no new node); once per previous run.
  bool Merge(std::span<const protocol::MemberRecord> records, int64_t now_ms, int64_t wall_ms,
             std::vector<Restart>* restarts = nullptr);

  // A message straight from `sender` arrived at now_ms/wall_ms, sent at its
  // wall clock sender_wall_ms (0: not said): it was heard, and its clock
  // offset is sampled.
  void HeardFrom(NodeId sender, int64_t sender_wall_ms, int64_t now_ms, int64_t wall_ms);
  // An ack from `member` came through another node.
  void HeardThrough(NodeId member, int64_t now_ms);

  // This node's probe of `member` went unanswered: an alive member turns
  // suspect, and the suspicion is sent on.
  void Suspect(NodeId member, int64_t now_ms);
  // Suspects that have not refuted within suspicion_ms turn dead (sent on).
  void Expire(int64_t now_ms);
  // This node stood still for stall_ms (Lifeguard's local health): the
  // suspicions counting down here wait that much longer, so that a node
  // that was slow does not judge others dead for its own slowness.
  void Postpone(int64_t stall_ms);
  // Some member is suspect here: Expire has work coming.
  bool AnySuspect() const;

  // Up to `max` queued records to send on, those sent least often first;
  // each is sent kTransmitFactor x ceil(log2(members + 1)) times in all.
  std::vector<protocol::MemberRecord> TakeUpdates(size_t max);
  // What a probe message to member `to` carries: up to `max` queued
  // updates (TakeUpdates); `to`'s own record if this node does not hold it
  // alive, so that it can refute (a member others judged dead is probed by
  // none of them, but it pings in its turn and hears it in the acks); and
  // with an ack, this node's own record.
  std::vector<protocol::MemberRecord> RecordsFor(NodeId to, bool ack, size_t max);
  // Members a probe may go to: not this node, not left, not dead.
  std::vector<NodeId> Probeable() const;

  // Every member known, this node included: a whole table.
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
  bool joined() const { return index_.size() > 1; }
  const protocol::MemberRecord& self() const { return self_->record; }
  // Moves whenever a record changes: a whole table encoded before is stale.
  uint64_t records_version() const { return records_version_; }

 private:
  struct Member {
    protocol::MemberRecord record;
    int64_t heard_ms = 0;      // now_ms when a message from it last arrived (or it was added)
    int64_t suspected_ms = 0;  // now_ms when this node heard of the suspicion it holds
    int64_t lag_ms = 0;
    int transmits_left = 0;  // times its record is still to be sent on
    int transmits_done = 0;
    std::optional<protocol::MemberState> reported;         // by TakeChanges
    std::array<int64_t, kOffsetSamples> offset_samples{};  // a ring, from its own messages
    size_t offsets_seen = 0;
    bool clock_off_reported = false;  // by TakeClockChanges: beyond the threshold
  };
  // The estimate from the member's samples; nullopt before the first.
  static std::optional<int64_t> ClockOffsetMs(const Member& member);
  protocol::MemberStatus StatusOf(const Member& member, int64_t now_ms) const;
  // The record changed: send it on, kTransmitFactor x log2 of the cluster's size times.
  void Queue(Member* member);
  // A record of this node's own run that it must answer (refute).
  bool Refute(const protocol::MemberRecord& record, int64_t wall_ms);

  // A member in the index: its id beside it, so that a lookup reads the
  // index alone.
  struct Slot {
    NodeId id = 0;
    Member* member = nullptr;
  };
  // The member `id`, or null.
  Member* Find(NodeId id) const;
  // The member `id`, added (heard now_ms) if new; *added says which. *hint:
  // where the last lookup of a run of ids in ascending order ended (a whole
  // table's records come so: each is found a step or two on).
  Member* FindOrAdd(NodeId id, int64_t now_ms, size_t* hint, bool* added);

  const NodeId self_id_;
  const int64_t suspicion_ms_;
  // Every member known, never removed (one that left stays, marked): stored
  // where it never moves (Queue and TakeUpdates hold pointers), and indexed
  // by id in ascending order, in which every pass over the members goes.
  // At 1,000 members a table's merge reads the index in order instead of
  // walking a tree per record.
  std::deque<Member> storage_;
  std::vector<Slot> index_;
  Member* self_ = nullptr;
  size_t queued_ = 0;  // members with transmits left (TakeUpdates)
  uint64_t records_version_ = 0;
  // The latest of this node's previous runs reported as a restart (Merge).
  uint64_t previous_run_reported_ = 0;
};

}  // namespace tally
