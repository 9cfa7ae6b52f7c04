// SimNode: one tallyd of the simulation. The daemon's own no-I/O parts do
// the work: the engine (Limiter), a round's deltas (CollectRoundDeltas),
// the merge of what arrives (StateMerger), the full sync and anti-entropy a
// link owes its peer (LinkSync, anti_entropy.h), membership (MemberAgent),
// crash losses (MemberLosses), and the peer codec (every message is encoded
// and decoded). What the daemon does with Asio (node/gossip/gossip.cc) is
// done here by the simulation's events, in the same order: a round sends the
// deltas, ticks the membership, follows it (cluster size, links that went
// down), answers digests due, and every anti-entropy interval of wall time
// sends the digests due; a round rests while there is nothing to send, as
// the daemon's does.
//
// Links: a node has one link to every member and seed it knows; the
// simulation brings them up (LinkUp, when both ends run and the network
// joins them) and down. Persistence: a SimStore stands for the data
// directory; Flush writes what changed (Limiter::CollectChanges), and a
// node that restarts on it restores it, as tallyd does.
//
// Time: the node's Clock reads the simulation's time, its wall clock off by
// an offset the simulation may step.
// Thread safety: none (the simulation is single-threaded).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/clock.h"
#include "node/common/crash_loss.h"
#include "node/engine/limiter.h"
#include "node/gossip/anti_entropy.h"
#include "node/gossip/link_sync.h"
#include "node/gossip/member_agent.h"
#include "node/gossip/member_losses.h"
#include "node/gossip/round_clock.h"
#include "node/gossip/state_merger.h"
#include "node/sim/event_queue.h"
#include "node/sim/network.h"

namespace tally::sim {

// The wall clock of a simulated node: the simulation's time from
// kWallOriginMs, plus an offset (a clock that is off, or stepped).
class SimClock final : public Clock {
 public:
  static constexpr int64_t kWallOriginMs = 1'800'000'000'000;  // 2027-01-15
  SimClock(const EventQueue* events, int64_t offset_ms) : events_(events), offset_ms_(offset_ms) {}
  int64_t WallMs() const override { return kWallOriginMs + events_->now_ms() + offset_ms_; }
  int64_t MonotonicMs() const override { return events_->now_ms(); }
  void SetOffsetMs(int64_t offset_ms) { offset_ms_ = offset_ms; }
  int64_t offset_ms() const { return offset_ms_; }

 private:
  const EventQueue* const events_;
  int64_t offset_ms_;
};

// What a node's data directory holds.
struct SimStore {
  std::map<std::string, KeySnapshot> records;  // by key, algorithm and window
  std::vector<CrashLoss> crash_losses;
  bool serving = false;  // set at start, cleared by a clean stop: a crash leaves it set
};

class SimNode {
 public:
  struct Config {
    NodeId id = 0;
    std::vector<NodeId> seeds;
    int64_t interval_ms = 50;
    int64_t membership_interval_ms = 500;
    int64_t suspect_after_ms = 1'000;
    int64_t dead_after_ms = 2'500;
    int64_t anti_entropy_interval_ms = 30'000;
    int64_t gossip_max_delay_ms = 10'000;
    bool relay = true;
    bool escrow = false;
    bool partition_share = false;
    bool plain_gossip = false;
    uint64_t key_hash_seed = 1;
    size_t max_frame_bytes = 256 * 1024;
    int64_t recovery_timeout_ms = 3'000;  // a restarted node waits this long at most
    // A test of the simulation itself: anti-entropy never sends a range, so
    // that a lost delta stays lost.
    bool break_repair = false;
  };
  // Sends a frame from this node to `to` (the network decides its fate).
  using Send = std::function<void(NodeId to, const Frame& frame)>;
  // Called with the entries of a peer's state once merged, for the
  // simulation's checks.
  using Merged = StateMerger::Merged;

  // store: not owned, null for a memory-only node; a run that finds it
  // marked serving follows a crash.
  SimNode(const Config& config, EventQueue* events, SimStore* store, int64_t clock_offset_ms,
          Send send, Merged merged);

  // Due at next_round_at_ms().
  void Round();
  int64_t next_round_at_ms() const { return round_clock_.next_round_at_ms(); }
  void Receive(NodeId from, std::string_view frame);
  // This node's link to `peer` came up (reaching its run peer_incarnation) or went down.
  void LinkUp(NodeId peer, uint64_t peer_incarnation);
  void LinkDown(NodeId peer);
  // A link of `peer`'s run `incarnation` to this node came up.
  void SessionUp(NodeId peer, uint64_t incarnation);
  // Writes what changed to the store: at most max_records of it (fewer: a
  // crash in the middle of a flush).
  void Flush(size_t max_records = SIZE_MAX);
  // A clean stop: tells every member, sends what waits, writes everything.
  void Leave();
  // A request from a client; Unavailable while the node recovers.
  Status Check(std::string_view key, const LimitSpec& spec, uint64_t cost, Decision* decision);

  // The members and seeds this node keeps a link to.
  std::set<NodeId> WantedLinks() const;
  bool link_up(NodeId peer) const;
  bool wants_link(NodeId peer) const { return links_.contains(peer); }
  // Moves when the links this node wants change, or one goes down: the
  // simulation dials what is down then.
  uint64_t link_events() const { return link_events_; }
  bool serving() const { return serving_; }
  uint64_t incarnation() const { return incarnation_; }
  NodeId id() const { return config_.id; }
  Limiter& limiter() { return *limiter_; }
  const Membership& membership() const { return agent_->membership(); }
  const MemberLosses& losses() const { return *losses_; }
  SimClock& clock() { return clock_; }

  struct Counters {
    uint64_t delta_entries_sent = 0;  // key entries in deltas, per peer sent to
    uint64_t digests_sent = 0;
    uint64_t ranges_sent = 0;
    uint64_t full_syncs_sent = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Link {
    bool up = false;
    uint64_t peer_incarnation = 0;
    LinkSync sync;
  };
  struct Recheck {
    NodeId peer = 0;
    int64_t ref_ms = 0;
    int64_t due_ms = 0;
    std::vector<protocol::RangeDigest> digests;
  };

  int64_t NowMs() const { return clock_.MonotonicMs(); }
  int64_t WallMs() const { return clock_.WallMs(); }
  void SendFrames(NodeId to, const std::vector<std::string>& frames);
  void SendTo(NodeId to, std::string frame);
  // The whole membership table, encoded once per version of it.
  Frame TableFrame();
  // The membership's messages, encoded with this node's crash losses.
  void Deliver(const std::vector<MemberAgent::Outgoing>& out);
  // Cluster size, links that went down, crash losses (gossip.cc's FollowMembership).
  void FollowMembership();
  // Sends all that the link owes its peer (a full sync, wanted ranges): when
  // it comes up and when the peer asks, the only times it comes to owe.
  void PumpSync(NodeId peer, Link& link);
  void SendDigests(int64_t ref_ms);
  void RunRechecks();
  void ReceiveDigests(NodeId from, protocol::PeerMessage& message);
  void CheckRecovered();
  // Work arrived: the next round an interval after the last.
  void EndRest() { round_clock_.EndRest(NowMs()); }

  const Config config_;
  EventQueue* const events_;
  SimStore* const store_;
  const Send send_;
  SimClock clock_;
  uint64_t incarnation_ = 0;
  std::unique_ptr<Limiter> limiter_;
  std::optional<MemberAgent> agent_;
  std::optional<MemberLosses> losses_;
  StateMerger merger_;
  std::map<NodeId, Link> links_;
  // The peers whose link is up, in ascending order, and those whose link
  // went down since FollowMembership last looked: a round's passes go over
  // these, not over every link (a node of a 1,000-node run has 999).
  std::vector<NodeId> up_;
  std::vector<NodeId> went_down_;
  std::set<NodeId> synced_from_;   // peers whose full sync arrived
  std::vector<Recheck> rechecks_;  // by due time
  // Answers to a peer's digests that wait for the link to it to come up.
  struct PendingAnswer {
    std::set<uint32_t> want, later;
  };
  std::map<NodeId, PendingAnswer> pending_answers_;
  Frame table_;  // the whole membership table, encoded at table_version_
  uint64_t table_version_ = 0;
  size_t cluster_size_ = 1;
  RangeAskBudget ask_budget_;
  DigestLedger digest_ledger_;
  bool flush_deferred_ = false;
  bool serving_ = false;
  int64_t started_ms_ = 0;
  RoundClock round_clock_{0, 0};  // set when the node starts
  int64_t next_digests_at_ms_ = 0;
  bool leaving_ = false;
  uint64_t followed_version_ = UINT64_MAX;       // records_version FollowMembership last saw
  std::vector<protocol::MemberRecord> records_;  // as of followed_version_
  Counters counters_;
  uint64_t link_events_ = 0;
};

// The store's name of a snapshot's state: key, algorithm and window.
std::string StoreKey(const KeySnapshot& snapshot);

}  // namespace tally::sim
