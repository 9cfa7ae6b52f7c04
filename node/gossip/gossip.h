// Gossip: replicates this node's counting and log state to its peers and
// merges theirs, so that every node enforces one cluster-wide limit; and
// keeps the cluster's membership (README "Cluster").
//
// Membership (node/gossip/membership.h, prober.h): the node starts from
// seeds (host:port, the name may resolve to several addresses; seeds that
// are this node are skipped) and dials them; each link sends this node's
// whole membership table right after the handshake. Whoever learns of a
// member dials its advertised address, so joining through any one seed
// reaches every member. Failures are found by SWIM's probes: every
// membership_interval_ms a node pings one member (with indirect probes
// through others when the ping goes unanswered); a member that answers
// none within suspect_after_ms is suspect, and dead when it has not refuted
// the suspicion by dead_after_ms (its link keeps redialling: it may come
// back, or be cut off; once it is heard of again, the redial is
// immediate). A member whose link drops is probed at once. What changed
// (suspicions, deaths, refutations, leaves) rides on the probes. One that
// leaves (Leave) is dropped by every node at once; one that restarts is
// alive again with its first table. A seed that turns out to be a member
// known under another address is dropped for that member's link.
//
// Links: for every member (and seed) this node keeps one outgoing TCP
// connection that carries its own state and its membership messages to
// that peer: a hello (answered by the peer's hello), then a full sync
// (every live replicated key with every node's slots and stamps, shard by
// shard, then syncDone), then every interval_ms a delta (the keys admitted
// to here since the last round, this node's own slots and new stamps
// only), and every full_sync_interval_ms anti-entropy: the digests of the
// key ranges that changed since their digests last went out, and the ranges
// whose digests the peer found to differ (node/gossip/anti_entropy.h). A
// link with nothing to send sends nothing: TCP keepalive ends a connection
// whose peer vanished. Rounds rest while there is nothing to send, every
// link is up and no probe or suspicion is under way: after a round that
// sent nothing, the next comes when the next ping, the earliest admission
// that waits or anti-entropy's next interval is due, or an interval after
// the last one as soon as the Limiter has something for it (NoteWork).
// A link that breaks is redialled with a backoff (reconnect_min_ms doubling
// to reconnect_max_ms) and starts with a full sync again: that is the
// anti-entropy that repairs whatever deltas were lost with the connection.
// A link whose writes stall past write_timeout_ms, or whose queue exceeds
// max_queued_bytes (a peer too slow for the deltas), is reset the same way.
//
// Authentication: both hellos carry fresh nonces; every message after the
// dialler's hello is sealed with an HMAC under a key derived from the
// cluster secret and both nonces, and a sequence number
// (protocol/peer_auth.h). A peer without the secret cannot get past the
// handshake; a replayed or reordered message fails its seal. Until a
// session's first seal checks out, its peer may send frames of at most
// 4 KiB (a dialler's first sealed message is a heartbeat), so an outsider
// never gets more than the session's initial buffer; sessions that have not
// proven the secret are limited per address and in all (Options). Beyond
// that, receive buffers grow only as large frames arrive, by at most
// max_buffer_bytes for all sessions together (node/net/receive_buffer.h);
// a session that needs more is refused. A frame dripped slowly is closed by
// the idle timeout, which runs from the frame's first byte, not its last.
//
// TLS (Options::tls, node/tls/tls_context.h): every link and session runs
// TLS 1.3 under the connection, with a PSK derived from the cluster secret
// or with mutual certificates; the handshake comes before the hellos and is
// bounded by connect_timeout_ms (links) and idle_timeout_ms (sessions). A
// session whose handshake fails is refused like any other (logged with the
// reason: another PSK, a certificate not from the CA, a plaintext peer).
// The hellos and seals stay as they are under TLS (ARCHITECTURE.md says why).
//
// Sessions: peers dial this node's gossip port; their state is max-merged
// into the Limiter as it arrives (idempotent: duplicated, replayed or
// reordered messages change nothing). A session that sends anything but a
// well-formed hello first, a message without a valid seal, garbage, this
// node's own id, or that sends no sealed message within idle_timeout_ms of
// opening, or leaves a message half there that long, is closed and logged
// (rate-limited); the others go on. With max_connections sessions open, a
// new connection is closed at once (logged, counted as refused). Accepting
// backs off when descriptors run out (node/net/accept_loop.h). The
// gossip port carries only the peer protocol: no client request is served
// there, and the client port accepts no peer message.
//
// The Limiter learns the cluster's size (members that have not left, this
// node included) and how many of them no link reaches, for escrow and the
// partition mode.
//
// Threads: one thread ("tally-gossip") runs an io_context that owns every
// link, session, timer and buffer; the membership table is guarded by a
// mutex. The Limiter is thread-safe. AddStats, WaitForRecovery and Leave may
// be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "node/common/clock.h"
#include "node/common/crash_loss.h"
#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "protocol/messages.h"

namespace tally {

class TlsContext;

class Gossip {
 public:
  struct Options {
    std::string listen_address = "127.0.0.1";
    uint16_t listen_port = 7421;     // 0: an ephemeral port, see port()
    std::vector<std::string> seeds;  // host:port of peers' gossip ports; may list this node
    std::string advertise_address;   // host:port peers dial; empty: listen_address:port()
    std::string cluster_secret;      // shared by the members; protocol::kMinSecretBytes or more
    // TLS on every link and session (TlsContext::ForGossipPsk or
    // ForGossipCerts); null: plain text. Not owned; must outlive the Gossip.
    const TlsContext* tls = nullptr;
    int64_t interval_ms = 50;
    // Relay (node/engine/headroom.h): a counter's admissions that waited go
    // to the key's relayer, one of the members that relay, which sends every
    // node's slots of it on to every peer; and this node relays for others
    // (its hello says so). false: it sends every delta to every peer itself.
    bool relay = true;
    // One member probed per interval (node/gossip/prober.h): about four
    // small messages per node per interval, whatever the cluster's size.
    int64_t membership_interval_ms = 500;
    // A probe unanswered this long (x 1 + local health) makes its member
    // suspect; one that does not refute within dead_after_ms -
    // suspect_after_ms after that is dead. So a killed node, whose links
    // drop at once and which is probed then, is dead dead_after_ms later.
    int64_t suspect_after_ms = 1'000;
    int64_t dead_after_ms = 2'500;
    // A member whose clock is off this node's by more is warned about in the log.
    int64_t max_clock_offset_ms = 100;
    // Anti-entropy's interval (node/gossip/anti_entropy.h).
    int64_t full_sync_interval_ms = 30'000;
    int64_t idle_timeout_ms = 5'000;
    int64_t write_timeout_ms = 5'000;
    int64_t connect_timeout_ms = 1'000;
    int64_t reconnect_min_ms = 50;
    int64_t reconnect_max_ms = 1'000;
    size_t max_connections = 256;  // sessions from peers; beyond it a connection is closed at once
    // Sessions that have not proven the cluster secret yet: from one IP
    // address (more are refused), and in all (the oldest makes room).
    size_t max_unauthenticated_per_address = 8;
    size_t max_unauthenticated = 64;
    size_t max_frame_bytes = 256 * 1024;         // frames this node sends
    size_t max_queued_bytes = 64 * 1024 * 1024;  // per link
    // Receive buffers of all sessions and links together, beyond 16 KiB
    // each: a session whose next frame needs more is refused.
    size_t max_buffer_bytes = size_t{128} << 20;
    // Monotonic time for intervals and timeouts, wall time for probes
    // and incarnations. Not owned; must outlive the Gossip.
    const Clock* clock = SystemClock::Default();
    // Crash losses (node/gossip/member_losses.h): those this node stored,
    // whether its data directory says its last run did not stop cleanly, and
    // where to store them when they change (called on the gossip thread;
    // may be empty: a memory-only node).
    std::vector<CrashLoss> stored_crash_losses;
    bool crashed = false;
    std::function<void(std::span<const CrashLoss>)> crash_losses_changed;
  };

  // limiter must outlive the Gossip and have Options::replicate set.
  Gossip(const Options& options, Limiter* limiter);
  ~Gossip();  // Stop()
  Gossip(const Gossip&) = delete;
  Gossip& operator=(const Gossip&) = delete;

  // Binds the gossip port. After OK, port() is the bound port.
  // InvalidArgument when the cluster secret is too short, or there is no
  // usable address to advertise (listening on 0.0.0.0 or :: needs one).
  Status Listen();
  uint16_t port() const;
  // Starts the gossip thread: dials the seeds, accepts, runs the rounds.
  // The wall-clock time now is this run's incarnation; a crash before it
  // (Options::crashed) is a crash loss from now on.
  void Start();

  struct Recovery {
    bool joined = false;      // heard from a member, or no seed but this node
    size_t peers_alive = 0;   // other members alive in this node's view
    size_t peers_synced = 0;  // of those, how many completed a full sync to this node
  };
  // Blocks until this node has joined and every alive member has completed
  // a full sync to it, or timeout_ms passed. While it waits, `progress` (if
  // set) is called on the caller's thread with how far it is, about every
  // kRecoveryProgressMs and without any lock of the Gossip held.
  static constexpr int64_t kRecoveryProgressMs = 250;
  Recovery WaitForRecovery(int64_t timeout_ms,
                           const std::function<void(const Recovery&)>& progress = {});
  // Runs the next round soon, no sooner than a tenth of interval_ms after the
  // last one, instead of a whole interval after it: the Limiter asks for it
  // (Limiter::SetRoundWanted) when this node's unsent admissions on a key
  // near its limit come to an eighth of its share. Thread-safe; returns at once.
  void WantRound();
  // The Limiter has something for the next round (Limiter::SetGossipWork):
  // if the thread rests because the last round found nothing to send, the
  // next round comes an interval after the last, as without rest.
  // Thread-safe; returns at once.
  void NoteWork();
  // Tells every peer this node leaves (they drop it at once instead of
  // suspecting it), waits up to timeout_ms for that to be sent, then Stop().
  void Leave(int64_t timeout_ms);
  // An operator's word that `member` is gone for good: it counts as left
  // from now on, here and (with the whole table, sent at once) at every
  // node, which stop dialling it and no longer count it in the cluster's
  // size; what it kept back counts as lost (a crash loss). A refutation by
  // the same run, or a newer run, brings it back. *forgotten: it was
  // counted and is not now; InvalidArgument for a node id nobody knows here
  // and for this node's own. Thread-safe; waits for the gossip
  // thread (Unavailable after 5 s, or when gossip is not running).
  Status ForgetMember(NodeId member, bool* forgotten);
  // Closes every connection and joins the thread. Idempotent.
  void Stop();

  // Adds the gossip fields (counters, links, peer nodes, members) to *stats.
  void AddStats(protocol::StatsReply* stats) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally
