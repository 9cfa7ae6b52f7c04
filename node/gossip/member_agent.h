// MemberAgent: one node's membership logic with no I/O, no threads and no
// clock of its own: SWIM's probing (node/gossip/prober.h) over the
// membership table (node/gossip/membership.h), and what each message
// carries. Its caller passes the time, which members it can send to now,
// and the messages that arrive, and delivers the messages it returns: the
// daemon from the gossip thread over its links (gossip_probes.cc), a
// simulation from its event queue.
//
// Messages: a probe (ping or ack) with the records that changed
// (Membership::RecordsFor); every kTableEvery-th ping of this node's
// carries the whole table instead, so that a record the epidemic missed
// still arrives. A refutation goes to every member at once (to kEveryone).
//
// Thread safety: none. The daemon calls it under the gossip's mutex, which
// also guards membership() for the threads that read stats.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "node/common/node_id.h"
#include "node/gossip/membership.h"
#include "node/gossip/prober.h"
#include "protocol/messages.h"
#include "protocol/peer_codec.h"

namespace tally {

class MemberAgent {
 public:
  static constexpr size_t kUpdatesPerMessage = 8;
  static constexpr uint64_t kTableEvery = 20;
  // Outgoing::to for a message to every member linked now.
  static constexpr NodeId kEveryone = 0;

  struct Options {
    Membership::Options membership;
    Prober::Options prober;  // prober.self: membership.self.node_id
  };
  // A members message to send; probe.wall_ms is the sender's to fill in.
  struct Outgoing {
    NodeId to = kEveryone;
    std::vector<protocol::MemberRecord> records;
    std::optional<protocol::Probe> probe;
  };
  using Linked = Prober::Linked;

  MemberAgent(const Options& options, int64_t now_ms);

  // Every round: pings, indirect probes, failed probes turned suspect,
  // suspects turned dead.
  void Tick(int64_t now_ms, const Linked& linked, std::vector<Outgoing>* out);
  // The link to `member` went down: it is probed now, not in its turn.
  void LinkDown(NodeId member, int64_t now_ms, std::vector<Outgoing>* out);
  // A link to `member` came up: a ping of it under way goes again now.
  void LinkUp(NodeId member, std::vector<Outgoing>* out);
  // A members message from `from`, arrived at now_ms / wall_ms: its records
  // are merged (restarts as Membership::Merge says), its sender heard, its
  // probe answered or forwarded; a refutation goes out if it suspected this node.
  void Receive(NodeId from, const protocol::PeerMessage& message, int64_t now_ms, int64_t wall_ms,
               std::vector<Membership::Restart>* restarts, std::vector<Outgoing>* out);
  // This node stood still for stall_ms (its timers fired that late).
  void Stalled(int64_t stall_ms);

  // A probe or a suspicion is under way: rounds must come every interval.
  bool busy() const { return prober_.busy() || membership_.AnySuspect(); }
  int64_t next_ping_in_ms(int64_t now_ms) const { return prober_.next_ping_in_ms(now_ms); }
  Membership& membership() { return membership_; }
  const Membership& membership() const { return membership_; }

 private:
  // The message for one probe: records by RecordsFor, or the whole table.
  void Add(const Prober::Message& message, std::vector<Outgoing>* out);

  Membership membership_;
  Prober prober_;
  uint64_t pings_sent_ = 0;
};

}  // namespace tally
