// Internal to node/gossip/*.cc: what the gossip links and sessions share.
// Includes asio: never include it from a header outside node/gossip/.
//
// Threads: everything here runs on the gossip thread, except GossipShared's
// counters (relaxed atomics) and the fields guarded by GossipShared::mu,
// which other threads read for stats and WaitForRecovery.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <asio.hpp>

#include "node/engine/limiter.h"
#include "node/gossip/gossip.h"
#include "node/gossip/link_sync.h"
#include "node/gossip/member_agent.h"
#include "node/gossip/member_losses.h"
#include "node/gossip/state_merger.h"
#include "node/net/rate_limited_log.h"
#include "node/net/receive_buffer.h"
#include "node/tls/tls_stream.h"
#include "protocol/messages.h"
#include "protocol/peer_auth.h"
#include "protocol/peer_codec.h"

namespace tally {

using asio::ip::tcp;
using Frame = std::shared_ptr<const std::string>;

// The limits on frames a peer may send once it has proven the cluster
// secret: the sender cuts frames at Options::max_frame_bytes (at most
// 1 MiB) plus one entry.
protocol::FrameLimits PeerFrameLimits();

// The limits before that: a hello, a seal, and the dialler's first sealed
// message (a heartbeat) are tiny, so an outsider never gets a large buffer.
protocol::FrameLimits HandshakeFrameLimits();

// Turns on TCP keepalive: a connection whose peer vanished without a word
// (a host that lost power) ends within about a minute though nothing is
// sent on it at rest. The kernel sends the probes: nothing wakes up here.
void KeepAlive(tcp::socket& socket);

class MemberProbes;
class PeerLink;

struct GossipShared {
  GossipShared(const Gossip::Options& gossip_options, Limiter* replicated)
      : options(gossip_options),
        limiter(replicated),
        log(gossip_options.clock, "gossip warnings"),
        buffer_budget(gossip_options.max_buffer_bytes),
        member_losses(replicated, gossip_options.crash_losses_changed) {}

  // The injected clock's readings (Options::clock).
  int64_t NowMs() const { return options.clock->MonotonicMs(); }
  int64_t WallMs() const { return options.clock->WallMs(); }

  const Gossip::Options options;  // options.cluster_secret: at least kMinSecretBytes
  Limiter* const limiter;
  RateLimitedLog log;          // gossip thread only
  BufferBudget buffer_budget;  // the receive buffers of every link and session

  std::atomic<uint64_t> rounds{0}, bytes_sent{0}, bytes_received{0}, delta_bytes_sent{0},
      delta_entries_sent{0}, full_syncs_sent{0}, full_syncs_received{0}, entries_merged{0},
      entries_rejected{0}, sessions_refused{0}, digests_sent{0}, ranges_sent{0};

  // Gossip thread only.
  uint64_t incarnation = 0;  // this node's run (Gossip::Start, before the thread)
  // Merges this node refused at its key cap (max_keys).
  uint64_t refused_at_cap = 0;
  // State this node forgot that its peers had sent it: keys erased
  // (tallyctl reset --local) and merges refused at its key cap. When it
  // moves, each link asks its peer for everything again (kResync) at its
  // next full sync.
  uint64_t Forgotten() const { return limiter->erasures() + refused_at_cap; }
  // The link to a node, if one is up (null: none).
  std::function<PeerLink*(NodeId)> link_to;
  MemberLosses member_losses;
  // A member restarted without leaving: the next round sends everything
  // that waits (what this node keeps back and what it holds as a relayer)
  // to every peer, so that every view, the restarted member's too, holds
  // what survived its crash within a delivery time, not two waits.
  bool flush_deferred = false;
  MemberProbes* probes = nullptr;  // the membership's messages; set by Gossip::Start
  // Ends a rest of the rounds (Gossip): the next round comes an interval
  // after the last. A link that goes down calls it, so that the engine hears
  // of the unreachable peer at the next round, as without rest.
  std::function<void()> end_rest;
  // Endpoints that answered with this node's own id: a seed's name that
  // resolves to this node as well as to others.
  std::set<tcp::endpoint> self_endpoints;
  // Answers to a peer's digests (anti-entropy) that wait for this node's
  // link to it to come up.
  struct PendingRanges {
    std::set<uint32_t> want, later;
  };
  std::map<NodeId, PendingRanges> pending_ranges;
  // Sends an answer to a peer's digests on the link to it, or keeps it in
  // pending_ranges until the link is up.
  void AnswerDigests(NodeId peer, std::vector<uint32_t> want, std::vector<uint32_t> later);
  // A peer's digests that differed from this node's, or that it could not
  // compare yet (anti-entropy), to be compared again at due_ms (NowMs) and
  // answered then: what was on its way has arrived by then (RecheckMs).
  struct Recheck {
    NodeId peer = 0;
    int64_t ref_ms = 0;
    int64_t due_ms = 0;
    std::vector<protocol::RangeDigest> digests;  // sorted by range
  };
  std::deque<Recheck> rechecks;  // by due_ms

  mutable std::mutex mu;                                  // guards the rest
  std::condition_variable recovery_changed;               // synced, or the membership, changed
  std::optional<MemberAgent> agent;                       // the membership; from Gossip::Start
  bool no_seed_but_self = false;                          // every seed is this node: nobody to join
  std::map<std::string, protocol::PeerLinkStatus> links;  // by address
  struct NodeState {
    protocol::PeerNodeStatus status;  // last_heard_ms_ago computed from last_heard_ms
    int64_t last_heard_ms = 0;        // NowMs()
    int sessions = 0;                 // open sessions from the node (a reconnect may overlap)
  };
  std::map<NodeId, NodeState> nodes;
  std::set<NodeId> synced;  // nodes that completed a full sync to this one

  static void Add(std::atomic<uint64_t>& counter, uint64_t delta) {
    counter.fetch_add(delta, std::memory_order_relaxed);
  }
};

// Reads from the stream into *buffer until `count` (1 or 2) whole frames
// within `limits` are there, their sizes into sizes[]. IOError when the
// connection ends or fails; Corruption for bytes that are no frame or a
// frame over the limits; ResourceExhausted when the buffer would grow past
// what shared.buffer_budget has left.
asio::awaitable<Status> ReadFrames(NetStream& stream, ReceiveBuffer* buffer, size_t count,
                                   size_t sizes[2], const protocol::FrameLimits& limits,
                                   GossipShared& shared);

// Compares a peer's digests (sorted by range, every range valid) with this
// node's at ref_ms (CompareShardDigests), one shard at a time with other
// work let in between.
asio::awaitable<void> CompareInTurns(GossipShared& shared, int64_t ref_ms,
                                     std::span<const protocol::RangeDigest> digests,
                                     std::vector<uint32_t>* want, std::vector<uint32_t>* later);

// Decodes the buffered frame at [offset, offset + bytes) (views into *buffer).
Status DecodeAt(const ReceiveBuffer& buffer, size_t offset, size_t bytes,
                protocol::PeerMessage* message);

// A message and the seal after it, both buffered at the front: OK when the
// seal carries `seq` and the mac of the message's frame under `auth`.
Status CheckSeal(const ReceiveBuffer& buffer, const size_t sizes[2], const protocol::PeerAuth& auth,
                 uint64_t seq);

// The connection this node dials to one peer, carrying its state there.
// Shared ownership: its pending operations keep it alive after Stop.
class PeerLink : public std::enable_shared_from_this<PeerLink> {
 public:
  PeerLink(GossipShared& shared, asio::io_context& io, std::string address);
  void Start();
  void Stop();
  // Queues a frame (if the link is up), sealed.
  void Send(const Frame& frame);
  // Ends the backoff before a redial: the peer is known to be back.
  void RedialNow();
  // Queues a round's delta frames (if the link is up).
  void SendDelta(const std::vector<Frame>& frames, uint64_t entries);
  // Every round: deadlines, status.
  void Tick(int64_t now_ms);
  // The peer forgot state it had (kResync): every shard goes again, in a
  // full sync that starts now (over, if one is under way).
  void ResyncAll();
  // Anti-entropy (node/gossip/anti_entropy.h). The ranges whose digests the
  // peer should get now (LinkSync::DigestsDue); none while the link is down.
  std::vector<uint32_t> DigestsDue(std::span<const uint32_t> due_everywhere,
                                   const std::vector<Limiter::RangeVersion>& versions) const;
  // Sends those ranges' digests (digests: by range; at least those) at
  // ref_ms, and tells the peer first if this node forgot state (kResync).
  void SendDigests(int64_t ref_ms, std::span<const uint32_t> due,
                   const std::vector<uint64_t>& digests);
  // The peer's answer: `want` goes whole; `later`'s digests go again next time.
  void AnswerReceived(std::span<const uint32_t> want, std::span<const uint32_t> later);
  bool up() const { return up_; }
  // Whether the link went down from up (not by Stop) since the last call:
  // the peer may have crashed with admissions it kept back.
  bool TakeWentDown() { return std::exchange(went_down_, false); }
  // Nothing queued or being written.
  bool idle() const { return !writing_ && queue_.empty(); }
  // The peer's id from its hello (0: never connected).
  NodeId peer_id() const { return peer_id_; }
  // Whether the peer said in its hello that it relays (node/engine/headroom.h).
  bool peer_relays() const { return peer_relays_; }
  // The peer's run this link reaches or last reached, from its hello (0: not said).
  uint64_t peer_incarnation() const { return peer_incarnation_; }
  // The address answers as this node: Run has ended, for good.
  bool is_self() const { return is_self_; }
  const std::string& address() const { return address_; }

 private:
  asio::awaitable<void> Run();
  asio::awaitable<Status> Connect();
  // Queues the frame and its seal (the next seq).
  void Enqueue(Frame frame);
  void WriteNext();
  // Queues the full sync's next shards, then wanted ranges, while the queue is short.
  void PumpSync();
  void Reset(const std::string& why);
  // For a reset's log line: whether a write was under way, and for how long.
  std::string WriteState() const;
  void PublishStatus();

  GossipShared& shared_;
  const std::string address_;
  NetStream stream_;     // plain or TLS by shared_.options.tls
  tcp::socket& socket_;  // stream_'s
  asio::steady_timer backoff_timer_;
  ReceiveBuffer in_;
  bool stopping_ = false;
  bool redial_now_ = false;
  bool is_self_ = false;
  bool up_ = false;
  bool ever_up_ = false;
  bool reported_down_ = false;
  bool went_down_ = false;  // TakeWentDown
  NodeId peer_id_ = 0;
  bool peer_relays_ = false;
  uint64_t peer_incarnation_ = 0;
  std::optional<protocol::PeerAuth> auth_;  // this connection's key
  uint64_t next_seq_ = 1;
  uint64_t generation_ = 0;  // one per connection: stale write callbacks are ignored
  int64_t deadline_ms_ = 0;  // connecting: give up then; 0: none
  std::deque<Frame> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  int64_t write_started_ms_ = 0;
  int64_t busy_since_ms_ = 0;  // when the queue last filled after being empty
  LinkSync sync_;              // the full sync and anti-entropy owed on this connection
  // GossipShared::Forgotten() when this link last told the peer (kResync).
  uint64_t forgotten_told_ = 0;
  uint64_t bytes_sent_ = 0, full_syncs_sent_ = 0, connects_ = 0;
};

// A connection a peer dialled to this node, carrying the peer's state here.
class PeerSession : public std::enable_shared_from_this<PeerSession> {
 public:
  // `sequence`: the order of accepting (1, 2, ...), to find the oldest session.
  PeerSession(GossipShared& shared, tcp::socket socket,
              std::set<std::shared_ptr<PeerSession>>* sessions, uint64_t sequence);
  void Start();
  void Close();
  // Closes the session as one refused: logged (rate-limited) and counted in
  // sessions_refused, once however often it is refused.
  void Refuse(const std::string& why);
  // Closes the session when no whole message arrived for idle_timeout_ms
  // while the peer has not proven the secret or a frame is half there: a
  // member with nothing to say may be silent for as long as it likes.
  void Tick(int64_t now_ms);
  // The peer has sent a message sealed under the cluster secret.
  bool proven() const { return counted_; }
  // The peer's IP address (unspecified when unknown).
  const asio::ip::address& address() const { return address_; }
  uint64_t sequence() const { return sequence_; }

 private:
  // For a session closed by the idle timeout, its log line: what it
  // received of the next message and its seal.
  std::string Progress() const;
  asio::awaitable<void> Run();
  asio::awaitable<Status> Serve();
  // Merges the message's state (StateMerger); a rejected entry is counted and logged.
  Status Merge(const protocol::PeerMessage& message);
  // A peer's digests (anti-entropy): compared one shard at a time; those
  // that differ, or are not quiet here, are compared again later
  // (GossipShared::rechecks) and answered then.
  asio::awaitable<void> CompareDigests(protocol::PeerMessage& message);
  // Membership records, the crash losses and the probe that came with them.
  void MergeMembers(const protocol::PeerMessage& message);
  // Records, under shared_.mu, that the node was heard: sessions opened (+1)
  // or closed (-1), entries merged, a full sync completed.
  void Heard(int sessions, uint64_t merged, bool synced);

  GossipShared& shared_;
  NetStream stream_;     // plain or TLS by shared_.options.tls
  tcp::socket& socket_;  // stream_'s
  std::set<std::shared_ptr<PeerSession>>* const sessions_;
  const asio::ip::address address_;
  const std::string peer_;
  const uint64_t sequence_;
  ReceiveBuffer in_;
  NodeId node_id_ = 0;
  std::optional<protocol::PeerAuth> auth_;
  uint64_t next_seq_ = 1;
  bool counted_ = false;  // counted among the node's open sessions
  bool refused_ = false;
  const int64_t opened_ms_;  // NowMs() when the session was accepted
  // Digests are being compared (Serve): the comparison yields, with the
  // message still in in_.
  bool handling_ = false;
  StateMerger merger_;  // the gossip thread's, like every member
};

// The membership's messages (node/gossip/member_agent.h) over the links:
// it calls the agent under GossipShared::mu and delivers what it returns,
// each probe with the sender's wall clock. Gossip thread only.
class MemberProbes {
 public:
  // links: the gossip's, by address; must outlive this.
  MemberProbes(GossipShared& shared, const std::map<std::string, std::shared_ptr<PeerLink>>* links);
  // Every round (MemberAgent::Tick).
  void Tick(int64_t now_ms);
  // The link to `member` went down: it is probed now, not in its turn.
  void LinkDown(NodeId member, int64_t now_ms);
  // The link to `member` came up: a ping of it under way goes now.
  void LinkUp(NodeId member);
  // A members message from node `from`; *restarts as Membership::Merge says.
  void Receive(NodeId from, const protocol::PeerMessage& message,
               std::vector<Membership::Restart>* restarts);
  // This node stood still for stall_ms.
  void Stalled(int64_t stall_ms);
  // The whole table to every link that is up, now.
  void SendTable();
  // The whole table, encoded (cached until a record changes): sent after every hello.
  Frame TableFrame();
  // A probe or a suspicion is under way: rounds must come every interval.
  bool busy() const;
  // When the next ping is due, from now.
  int64_t next_ping_in_ms(int64_t now_ms) const;

 private:
  void Deliver(const std::vector<MemberAgent::Outgoing>& out);

  GossipShared& shared_;
  const std::map<std::string, std::shared_ptr<PeerLink>>* const links_;
  Frame table_frame_;
  uint64_t table_version_ = 0;  // Membership::records_version() when table_frame_ was made
};

}  // namespace tally
