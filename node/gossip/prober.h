// Prober: SWIM's failure detector (Das, Gupta and Motivala, 2002) with
// Lifeguard's local health (Dadgar, Phillips and Currey, 2018), as logic
// with no I/O: its caller passes the time and the probes that arrive, and
// sends the messages it returns (node/gossip/gossip.cc over the links,
// tests by hand).
//
// Every interval_ms the node pings one member, the next of a shuffled
// round-robin order (so every member is pinged by each node once per
// round of the order, and by some node about once per interval). The
// member answers with an ack. A ping unanswered for half its timeout is
// asked of indirect_probes other members (ping-req): each pings the target
// for this node and forwards the ack; so one broken link does not make a
// member suspect. A probe with no ack at all within its timeout fails: the
// caller suspects the member (node/gossip/membership.h). A member whose
// link goes down is probed at once (ProbeNow), out of turn: a killed
// process closes its connections, and its peers need not wait for its turn.
//
// Each node sends about two messages and receives about two per interval
// (its ping and ack, and those of the member that probes it), plus
// indirect probes when a ping goes unanswered: the same at 3 members and
// at 64.
//
// Local health (Lifeguard): a score from 0 to kMaxHealth, +1 when a probe
// of this node's fails, when it must refute a suspicion of itself, or when
// it stood still (Stalled); -1 when a probe is answered. Timeouts are
// multiplied by 1 + the score: a node that is itself slow, and so misses
// acks, waits longer before it suspects others.
//
// Times: now_ms is monotonic. Thread safety: none (the gossip thread's).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "node/common/node_id.h"
#include "protocol/peer_codec.h"

namespace tally {

class Prober {
 public:
  struct Options {
    NodeId self = 0;
    int64_t interval_ms = 500;   // one member pinged per interval
    int64_t timeout_ms = 1'000;  // no ack within (x 1 + health): the probe fails
    size_t indirect_probes = 3;
    uint64_t seed = 1;  // the order's shuffles and the helpers' choice
  };
  static constexpr int kMaxHealth = 8;

  // A probe to send to node `to`.
  struct Message {
    NodeId to = 0;
    protocol::Probe probe;  // wall_ms is the sender's to fill in
  };
  // Whether this node can send to a member now (a link is up). Asked only
  // when indirect probes need helpers.
  using Linked = std::function<bool(NodeId)>;

  explicit Prober(const Options& options);

  // The work due at now_ms, given the members a probe may go to (not this
  // node) and those of them this node can send to now (`linked`): the next
  // ping when an interval has passed since the last; for pings unanswered
  // for half their timeout, the indirect probes through linked members and
  // the ping again (a joining node's links come up one by one: its first
  // ping may not have gone) (into *out); and the members whose probe failed
  // (into *failed).
  void Tick(int64_t now_ms, std::span<const NodeId> members, const Linked& linked,
            std::vector<Message>* out, std::vector<NodeId>* failed);
  // Pings `member` now, out of turn, unless a probe of it is under way.
  void ProbeNow(NodeId member, int64_t now_ms, std::vector<Message>* out);
  // A link to `member` came up: the ping of a probe of it under way goes
  // again, now that it can (the first may not have gone).
  void LinkUp(NodeId member, std::vector<Message>* out);
  // A probe that came from node `from`: answers a ping to this node,
  // forwards a ping meant for another (an indirect probe) or an ack meant
  // for another origin, and takes an ack of this node's own probe. Returns
  // the member such an ack vouches for (nullopt for anything else).
  std::optional<NodeId> Receive(NodeId from, const protocol::Probe& probe,
                                std::vector<Message>* out);
  // This node refuted a suspicion of itself: its health worsens.
  void Refuted();
  // This node stood still for stall_ms (its timers fired that late): the
  // probes under way wait that much longer, and its health worsens.
  void Stalled(int64_t stall_ms);

  // Lifeguard's score: 0 (healthy) to kMaxHealth.
  int health() const { return health_; }
  // Whether a probe is under way: its deadlines need rounds soon.
  bool busy() const { return !pending_.empty(); }
  // How long from now_ms until the next ping is due (0: now).
  int64_t next_ping_in_ms(int64_t now_ms) const {
    return pinged_ ? std::max<int64_t>(0, last_ping_ms_ + options_.interval_ms - now_ms) : 0;
  }

 private:
  struct Pending {
    uint64_t seq = 0;
    NodeId target = 0;
    int64_t started_ms = 0;
    int64_t timeout_ms = 0;  // timeout_ms x (1 + health) when it started
    bool indirect_sent = false;
  };
  void Start(NodeId target, int64_t now_ms, std::vector<Message>* out);
  // The probe (seq, origin, target, ack) to send to node `to`.
  static Message To(NodeId to, uint64_t seq, NodeId origin, NodeId target, bool ack) {
    return {to, protocol::Probe{seq, origin, target, ack, 0}};
  }
  bool UnderWay(NodeId member) const;
  void Worsen() { health_ = std::min(kMaxHealth, health_ + 1); }

  const Options options_;
  std::mt19937_64 random_;
  std::vector<NodeId> order_;  // this round of the round-robin, shuffled
  size_t next_ = 0;            // the next of order_ to ping
  int64_t last_ping_ms_ = 0;
  bool pinged_ = false;  // any ping yet (last_ping_ms_ is set)
  uint64_t next_seq_ = 1;
  std::vector<Pending> pending_;
  int health_ = 0;
};

}  // namespace tally
