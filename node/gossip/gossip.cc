#include "node/gossip/gossip.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "node/common/clock.h"
#include "node/common/host_port.h"
#include "node/gossip/anti_entropy.h"
#include "node/gossip/gossip_peer.h"
#include "node/gossip/round_clock.h"
#include "node/gossip/round_deltas.h"
#include "node/net/accept_loop.h"
#include "node/net/acceptor.h"

namespace tally {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The rounds' own time: real time even where the injected clock stands still
// (tests move it by hand while the rounds run).
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

// A round that comes this much later than it was due means the node stood
// still (a stopped process, a starved CPU): MemberProbes::Stalled.
constexpr int64_t kStallMs = 200;

// The completion handler of a coroutine spawned on the gossip thread.
auto LogFailure(const char* what) {
  return [what](std::exception_ptr e) {
    if (e) spdlog::error("gossip {} failed: an exception escaped", what);
  };
}

}  // namespace

struct Gossip::Impl {
  Impl(const Options& gossip_options, Limiter* limiter)
      : shared(gossip_options, limiter),
        acceptor(io),
        accept_loop(
            &acceptor, &shared.log, "the gossip port",
            [this] { return asio::any_io_executor(io.get_executor()); },
            [this](tcp::socket socket) { Admit(std::move(socket)); }),
        round_timer(io) {
    shared.end_rest = [this] { EndRest(); };
    shared.link_to = [this](NodeId node) -> PeerLink* {
      for (const auto& [address, link] : links) {
        if (link->up() && link->peer_id() == node) return link.get();
      }
      return nullptr;
    };
  }

  // A new connection to the gossip port becomes a session, unless
  // max_connections are open or its address has max_unauthenticated_per_address
  // sessions that have not proven the secret; at max_unauthenticated such
  // sessions, the oldest of them is closed to make room (so that holding them
  // costs an outsider a steady stream of new connections).
  void Admit(tcp::socket socket) {
    const asio::ip::address address = RemoteAddress(socket);
    const Gossip::Options& options = shared.options;
    std::shared_ptr<PeerSession> oldest;  // the oldest session not proven yet
    size_t unproven = 0, unproven_here = 0;
    for (const auto& session : sessions) {
      if (session->proven()) continue;
      ++unproven;
      unproven_here += session->address() == address ? 1 : 0;
      if (!oldest || session->sequence() < oldest->sequence()) oldest = session;
    }
    std::string refusal;
    if (sessions.size() >= options.max_connections) {
      refusal = std::to_string(sessions.size()) + " sessions open (--max-gossip-connections)";
    } else if (unproven_here >= options.max_unauthenticated_per_address) {
      refusal = std::to_string(unproven_here) +
                " sessions from its address have not proven the "
                "cluster secret yet";
    }
    if (!refusal.empty()) {
      GossipShared::Add(shared.sessions_refused, 1);
      shared.log.Warn("refusing gossip connection from " + PeerName(socket) + ": " + refusal);
      return;  // the socket closes as it goes out of scope
    }
    if (unproven >= options.max_unauthenticated) {
      oldest->Refuse("the oldest of " + std::to_string(unproven) +
                     " sessions that have not proven the cluster secret, closed for a new one");
    }
    asio::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    KeepAlive(socket);
    std::make_shared<PeerSession>(shared, std::move(socket), &sessions, ++sessions_accepted)
        ->Start();
  }

  // Every interval_ms, or sooner when asked (WantRound): this node's delta to
  // every link that is up, then the membership, the links' and sessions'
  // housekeeping. After a round that sent nothing, with every link up, no
  // probe or suspicion under way and no work noted meanwhile (NoteWork), the
  // next one comes when the next ping or the earliest of what waits is due
  // instead (rest), or as soon as work is noted.
  asio::awaitable<void> Rounds() {
    round_clock = RoundClock(shared.options.interval_ms, SteadyMs());
    while (!stopping) {
      // By the injected clock: how much later than planned the round comes.
      const int64_t wait_from_ms = shared.NowMs();
      const int64_t planned_ms = round_clock.next_round_at_ms() - SteadyMs();
      round_timer.expires_at(
          SteadyClock::time_point(std::chrono::milliseconds(round_clock.next_round_at_ms())));
      asio::error_code ec;
      co_await round_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (stopping) co_return;
      const int64_t now_ms = SteadyMs();
      if (now_ms < round_clock.next_round_at_ms()) continue;  // moved: wait for the new time
      const int64_t late_ms = shared.NowMs() - wait_from_ms - std::max<int64_t>(0, planned_ms);
      if (late_ms >= kStallMs) probes->Stalled(late_ms);
      round_clock.Begin(now_ms);
      round_wanted.store(false, std::memory_order_relaxed);
      resting.store(true, std::memory_order_relaxed);  // before the round looks for work
      Round(std::exchange(shared.flush_deferred, false));
      if (!round_clock.resting()) resting.store(false, std::memory_order_relaxed);
    }
  }

  // A shard noted work while the thread rested (NoteWork), a link went
  // down, or the node leaves: the next round comes an interval after the
  // last, or now if that has passed.
  void EndRest() {
    if (!stopping && round_clock.EndRest(SteadyMs())) {
      round_timer.cancel();  // Rounds waits again, for the new time
    }
  }

  // An early round, asked for by a key near its limit (WantRound).
  void BringRoundForward() {
    if (!stopping && round_clock.BringForward(SteadyMs())) {
      round_timer.cancel();  // Rounds waits again, for the new time
    }
  }

  // flush_deferred: send what waits too (node/engine/headroom.h), however
  // long it may still wait: the node is leaving. Tells round_clock how long
  // the thread may rest: not at all when it sent anything, a link is not up,
  // a probe or suspicion is under way, or the node leaves; else until the
  // next ping or the earliest of what waits is due.
  void Round(bool flush_deferred) {
    std::map<NodeId, PeerLink*> relayer_links;
    const std::vector<NodeId> relayers = Relayers(&relayer_links);
    RoundDeltas deltas = CollectRoundDeltas(*shared.limiter, relayers,
                                            shared.options.max_frame_bytes, flush_deferred);
    const std::vector<Frame> frames = Frames(deltas.to_every_peer.frames);
    for (auto& [relayer, delta] : deltas.to_relayer) {
      relayer_links.at(relayer)->SendDelta(Frames(delta.frames), delta.entries);
    }
    const int64_t now_ms = shared.NowMs();
    if (leave_done == nullptr) probes->Tick(now_ms);
    FollowMembership(now_ms);
    bool any_up = false, all_up = true, all_idle = true;
    for (const auto& [address, link] : links) {
      link->SendDelta(frames, deltas.to_every_peer.entries);
      link->Tick(now_ms);
      any_up = any_up || link->up();
      all_up = all_up && link->up();
      all_idle = all_idle && (!link->up() || link->idle());
    }
    const std::vector<std::shared_ptr<PeerSession>> open(sessions.begin(), sessions.end());
    for (const auto& session : open) session->Tick(now_ms);
    GossipShared::Add(shared.rounds, 1);
    shared.recovery_changed.notify_all();  // members may have turned suspect
    if (leave_done != nullptr && (all_idle || now_ms >= leave_deadline_ms)) {
      leave_done->set_value();
      leave_done = nullptr;
    }
    if (!any_up && !links.empty() && !alone) {
      spdlog::warn("no peer reachable: enforcing limits from this node's own knowledge only");
    } else if (any_up && alone) {
      spdlog::info("a peer is reachable again");
    }
    alone = !any_up && !links.empty();
    if (!shared.rechecks.empty() && shared.rechecks.front().due_ms <= now_ms && !rechecking) {
      rechecking = true;
      asio::co_spawn(io, Recheck(now_ms), LogFailure("anti-entropy"));
    }
    const int64_t wall_ms = shared.WallMs();
    if (wall_ms >= next_digests_at_ms && !digests_running && leave_done == nullptr) {
      const int64_t ref_ms = DigestRefMs(wall_ms, shared.options.full_sync_interval_ms);
      next_digests_at_ms = ref_ms + shared.options.full_sync_interval_ms;
      digests_running = true;
      asio::co_spawn(io, SendDigests(ref_ms), LogFailure("anti-entropy"));
    }
    const int64_t recheck_in_ms =
        shared.rechecks.empty() ? INT64_MAX : shared.rechecks.front().due_ms - now_ms;
    round_clock.End(deltas.to_every_peer.entries > 0 || !deltas.to_relayer.empty() || !all_up ||
                        leave_done != nullptr || probes->busy(),
                    {probes->next_ping_in_ms(now_ms), deltas.next_due_in_ms,
                     next_digests_at_ms - wall_ms, recheck_in_ms});
  }

  // Compares again the peers' digests that differed and are due by now_ms,
  // and asks for the ranges that still differ.
  asio::awaitable<void> Recheck(int64_t now_ms) {
    while (!stopping && !shared.rechecks.empty() && shared.rechecks.front().due_ms <= now_ms) {
      GossipShared::Recheck recheck = std::move(shared.rechecks.front());
      shared.rechecks.pop_front();
      std::vector<uint32_t> want, later;
      co_await CompareInTurns(shared, recheck.ref_ms, recheck.digests, &want, &later);
      ask_budget.Limit(recheck.ref_ms, recheck.peer, &want, &later);
      shared.AnswerDigests(recheck.peer, std::move(want), std::move(later));
    }
    rechecking = false;
  }

  // Anti-entropy's interval (node/gossip/anti_entropy.h): each link that is
  // up sends its peer the digests of the ranges due, computed once for all
  // links, one shard at a time (the rounds and sessions run in between).
  asio::awaitable<void> SendDigests(int64_t ref_ms) {
    Limiter& limiter = *shared.limiter;
    const std::vector<Limiter::RangeVersion> versions =
        AllRangeVersions(limiter, QuietMs(shared.options.interval_ms));
    std::vector<std::pair<std::shared_ptr<PeerLink>, std::vector<uint32_t>>> due;
    std::vector<uint32_t> due_everywhere = digest_ledger.Due(versions);
    std::vector<bool> wanted(Limiter::range_count());
    for (const auto& [address, link] : links) {
      std::vector<uint32_t> ranges = link->DigestsDue(due_everywhere, versions);
      for (const uint32_t range : ranges) wanted[range] = true;
      due.emplace_back(link, std::move(ranges));
    }
    IntervalDigests interval(wanted);
    for (size_t i = 0; i < interval.runs.size() && !stopping; ++i) {
      if (i > 0) co_await asio::post(io, asio::use_awaitable);
      interval.Compute(limiter, interval.runs[i], ref_ms);
    }
    for (auto& [link, link_ranges] : due) {
      interval.KeepCurrent(&link_ranges);
      if (!stopping) link->SendDigests(ref_ms, link_ranges, interval.digests);
    }
    interval.KeepCurrent(&due_everywhere);
    digest_ledger.Sent(due_everywhere, versions);
    digests_running = false;
  }

  // The members that may relay a key (node/engine/headroom.h), in no
  // particular order: with Options::relay, this node and every peer that
  // relays and that a link reaches now (*links: each one's link). Empty
  // without Options::relay: this node sends every delta to every peer.
  std::vector<NodeId> Relayers(std::map<NodeId, PeerLink*>* relayer_links) {
    std::vector<NodeId> relayers;
    if (!shared.options.relay) return relayers;
    relayers.push_back(self_id());
    for (const auto& [address, link] : links) {
      if (link->up() && link->peer_relays() &&
          relayer_links->emplace(link->peer_id(), link.get()).second) {
        relayers.push_back(link->peer_id());
      }
    }
    return relayers;
  }

  static std::vector<Frame> Frames(std::vector<std::string>& encoded) {
    std::vector<Frame> frames;
    for (std::string& frame : encoded)
      frames.push_back(std::make_shared<const std::string>(std::move(frame)));
    return frames;
  }

  // Links follow the membership: one to every member that has not left, and
  // one to every seed until it turns out to be this node, or a member that
  // advertises another address, or the address of a member forgotten for
  // good (ForgetMember). Then tells the Limiter the cluster's size.
  void FollowMembership(int64_t now_ms) {
    std::map<NodeId, std::string> members;  // the others that have not left: their addresses
    std::set<std::string> forgotten;        // addresses of members forgotten for good
    std::vector<protocol::MemberRecord> records;
    std::vector<protocol::MemberStatus> changes;
    std::vector<protocol::MemberStatus> clock_changes;
    size_t cluster_size = 1;
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      Membership& membership = shared.agent->membership();
      records = membership.Records();
      for (const protocol::MemberRecord& record : records) {
        if (record.forgotten) forgotten.insert(record.address);
        if (record.node_id == self_id() || record.left || record.address.empty()) continue;
        members[record.node_id] = record.address;
      }
      changes = membership.TakeChanges(now_ms);
      clock_changes = membership.TakeClockChanges(shared.options.max_clock_offset_ms, now_ms);
      cluster_size = membership.cluster_size();
    }
    for (const protocol::MemberStatus& change : clock_changes) LogClockChange(change);
    for (const protocol::MemberStatus& change : changes) {
      LogChange(change);
      const auto link = links.find(change.address);
      if (change.state == protocol::MemberState::kAlive && link != links.end()) {
        link->second->RedialNow();  // back (restarted, or heard of again): no need to wait
      }
    }
    std::map<std::string, NodeId> wanted;  // address: the member there (0: a seed)
    for (const std::string& seed : shared.options.seeds) {
      if (!dropped_seeds.contains(seed) && !forgotten.contains(seed)) wanted.emplace(seed, 0);
    }
    for (const auto& [node_id, address] : members) wanted[address] = node_id;
    for (auto it = links.begin(); it != links.end();) {
      if (KeepLink(*it->second, wanted, members)) {
        ++it;
        continue;
      }
      it->second->Stop();
      {
        std::lock_guard<std::mutex> lock(shared.mu);
        shared.links.erase(it->first);
      }
      it = links.erase(it);
    }
    for (const auto& [address, node_id] : wanted) {
      if (links.contains(address) || dropped_seeds.contains(address)) continue;
      auto link = std::make_shared<PeerLink>(shared, io, address);
      link->Start();
      links.emplace(address, std::move(link));
    }
    size_t unreachable = 0;
    for (const auto& [node_id, address] : members) {
      const auto link = links.find(address);
      unreachable += link == links.end() || !link->second->up() ? 1 : 0;
      // Down, and not up again already (a new connection to the same run
      // shows it alive: MemberLosses::Alive).
      if (link != links.end() && link->second->TakeWentDown() && !link->second->up()) {
        probes->LinkDown(node_id, now_ms);
        shared.member_losses.LinkWentDown(
            *std::find_if(records.begin(), records.end(),
                          [id = node_id](const protocol::MemberRecord& record) {
                            return record.node_id == id;
                          }),
            link->second->peer_incarnation(), shared.WallMs());
      }
    }
    shared.member_losses.Follow(records, self_id(), shared.WallMs());
    shared.limiter->SetClusterView(cluster_size, unreachable);
    bool seeds_are_self = true;
    for (const std::string& seed : shared.options.seeds) {
      seeds_are_self = seeds_are_self && self_seeds.contains(seed);
    }
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.no_seed_but_self = seeds_are_self;
  }

  // False for a link to drop: to an address no longer wanted (a member
  // left), or a seed that turned out to be this node or a member that
  // advertises another address (which gets a link of its own).
  bool KeepLink(const PeerLink& link, const std::map<std::string, NodeId>& wanted,
                const std::map<NodeId, std::string>& members) {
    if (link.is_self()) {
      self_seeds.insert(link.address());
      dropped_seeds.insert(link.address());
      return false;
    }
    const auto want = wanted.find(link.address());
    if (want == wanted.end()) return false;
    const auto member = members.find(link.peer_id());
    if (want->second == 0 && link.up() && member != members.end() &&
        member->second != link.address()) {
      spdlog::info("gossip seed {} is node {}: linking to its address {} instead", link.address(),
                   link.peer_id(), member->second);
      dropped_seeds.insert(link.address());
      return false;
    }
    return true;
  }

  void LogChange(const protocol::MemberStatus& member) {
    if (member.node_id == self_id()) return;
    const std::string_view state = protocol::MemberStateName(member.state);
    if (member.state == protocol::MemberState::kSuspect ||
        member.state == protocol::MemberState::kDead) {
      spdlog::warn("member node {} ({}) is {}: {}, last heard from {} ms ago", member.node_id,
                   member.address, state,
                   member.state == protocol::MemberState::kSuspect
                       ? "a probe went unanswered"
                       : "suspect for --dead-after-ms less --suspect-after-ms without answering",
                   member.last_heard_ms_ago);
    } else {
      spdlog::info("member node {} ({}) is {}", member.node_id, member.address, state);
    }
  }

  void LogClockChange(const protocol::MemberStatus& member) {
    const int64_t offset_ms = member.clock_offset_ms;
    if (offset_ms > shared.options.max_clock_offset_ms ||
        offset_ms < -shared.options.max_clock_offset_ms) {
      spdlog::warn(
          "member node {} ({}): its clock is {} ms {} this node's, more than "
          "--max-clock-offset-ms {}: windows are aligned to each node's wall clock, so the "
          "nodes count into different windows near window ends (keep clocks in sync with NTP)",
          member.node_id, member.address, offset_ms > 0 ? offset_ms : -offset_ms,
          offset_ms > 0 ? "ahead of" : "behind", shared.options.max_clock_offset_ms);
    } else {
      spdlog::info("member node {} ({}): its clock is within {} ms of this node's again",
                   member.node_id, member.address, shared.options.max_clock_offset_ms);
    }
  }

  NodeId self_id() const { return shared.limiter->node_id(); }

  // On the gossip thread.
  void Shutdown() {
    stopping = true;
    accept_loop.Stop();
    round_timer.cancel();
    for (const auto& [address, link] : links) link->Stop();
    const std::vector<std::shared_ptr<PeerSession>> open(sessions.begin(), sessions.end());
    for (const auto& session : open) session->Close();
    if (leave_done != nullptr) leave_done->set_value();
    leave_done = nullptr;
    io.stop();
  }

  GossipShared shared;
  std::string advertise_address;  // set by Listen
  // Owned by the gossip thread once it runs, all but round_wanted.
  asio::io_context io{1};
  tcp::acceptor acceptor;
  AcceptLoop accept_loop;
  asio::steady_timer round_timer;
  RoundClock round_clock{shared.options.interval_ms, 0};  // in SteadyMs; set by Rounds
  // Set by WantRound (any thread) until the round runs: one request posted at a time.
  std::atomic<bool> round_wanted{false};
  // Set by Rounds before each round looks for work, cleared by NoteWork (any
  // thread; a shard's mutex orders its work before this) or by a round that
  // finds work: while it holds, a round's rest stands.
  std::atomic<bool> resting{false};
  std::map<std::string, std::shared_ptr<PeerLink>> links;  // by address
  std::set<std::string> dropped_seeds;  // seeds found to be this node or a member elsewhere
  std::set<std::string> self_seeds;     // the seeds that are this node
  std::set<std::shared_ptr<PeerSession>> sessions;
  uint64_t sessions_accepted = 0;
  // Anti-entropy: the wall time of the next interval, and whether the
  // last one's digests are still being computed.
  int64_t next_digests_at_ms = 0;
  bool digests_running = false;
  bool rechecking = false;                   // Recheck runs
  RangeAskBudget ask_budget;                 // the ranges asked for in this interval
  DigestLedger digest_ledger;                // the ranges whose digests the peers are owed
  std::optional<MemberProbes> probes;        // from Start
  std::promise<void>* leave_done = nullptr;  // Leave waits for this
  int64_t leave_deadline_ms = 0;
  bool stopping = false;
  bool alone = false;  // no link up at the last round (logged once)
  std::thread thread;
};

Gossip::Gossip(const Options& options, Limiter* limiter)
    : impl_(std::make_unique<Impl>(options, limiter)) {}

Gossip::~Gossip() { Stop(); }

Status Gossip::Listen() {
  Impl& impl = *impl_;
  const Options& options = impl.shared.options;
  if (options.cluster_secret.size() < protocol::kMinSecretBytes) {
    return Status::InvalidArgument("the cluster secret must be at least " +
                                   std::to_string(protocol::kMinSecretBytes) + " bytes");
  }
  impl.advertise_address = options.advertise_address;
  if (impl.advertise_address.empty()) {
    if (options.listen_address == "0.0.0.0" || options.listen_address == "::") {
      return Status::InvalidArgument("gossip listens on " + options.listen_address +
                                     ": say which address peers should dial (--gossip-advertise)");
    }
  }
  if (impl.advertise_address.size() > protocol::kMaxMemberAddressBytes) {
    return Status::InvalidArgument("the advertised gossip address is longer than " +
                                   std::to_string(protocol::kMaxMemberAddressBytes) + " bytes");
  }
  Status status =
      tally::Listen(impl.acceptor, options.listen_address, options.listen_port, "the gossip port");
  if (status.ok() && impl.advertise_address.empty()) {
    impl.advertise_address = FormatHostPort(options.listen_address, port());
  }
  return status;
}

uint16_t Gossip::port() const { return BoundPort(impl_->acceptor); }

void Gossip::WantRound() {
  Impl& impl = *impl_;
  if (impl.round_wanted.exchange(true, std::memory_order_relaxed)) return;  // asked already
  asio::post(impl.io, [&impl] { impl.BringRoundForward(); });
}

void Gossip::NoteWork() {
  Impl& impl = *impl_;
  if (!impl.resting.load(std::memory_order_relaxed) ||
      !impl.resting.exchange(false, std::memory_order_relaxed)) {
    return;  // not resting, or told already
  }
  asio::post(impl.io, [&impl] { impl.EndRest(); });
}

void Gossip::Start() {
  Impl& impl = *impl_;
  protocol::MemberRecord self;
  self.node_id = impl.self_id();
  self.address = impl.advertise_address;
  self.incarnation = static_cast<uint64_t>(impl.shared.WallMs());
  impl.shared.incarnation = self.incarnation;
  const Gossip::Options& options = impl.shared.options;
  impl.shared.agent.emplace(
      MemberAgent::Options{
          Membership::Options{self, options.dead_after_ms - options.suspect_after_ms},
          Prober::Options{self.node_id, options.membership_interval_ms, options.suspect_after_ms, 3,
                          self.node_id ^ self.incarnation}},
      impl.shared.NowMs());
  impl.probes.emplace(impl.shared, &impl.links);
  impl.shared.probes = &*impl.probes;
  impl.shared.member_losses.Start(impl.shared.options.stored_crash_losses, self.node_id,
                                  self.incarnation, impl.shared.options.crashed,
                                  impl.shared.WallMs());
  impl.next_digests_at_ms = DigestRefMs(impl.shared.WallMs(), options.full_sync_interval_ms) +
                            options.full_sync_interval_ms;
  impl.self_seeds.insert(impl.advertise_address);
  impl.dropped_seeds.insert(impl.advertise_address);
  impl.FollowMembership(impl.shared.NowMs());
  asio::co_spawn(impl.io, impl.accept_loop.Run(), LogFailure("accept loop"));
  asio::co_spawn(impl.io, impl.Rounds(), LogFailure("rounds"));
  impl.thread = std::thread([&impl] {
    pthread_setname_np(pthread_self(), "tally-gossip");
    impl.io.run();
  });
  spdlog::info("gossip on {}:{} (advertised as {}), {} seeds, every {} ms",
               impl.shared.options.listen_address, port(), impl.advertise_address,
               impl.shared.options.seeds.size(), impl.shared.options.interval_ms);
}

Gossip::Recovery Gossip::WaitForRecovery(int64_t timeout_ms,
                                         const std::function<void(const Recovery&)>& progress) {
  GossipShared& shared = impl_->shared;
  const NodeId self_id = impl_->self_id();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Recovery recovery;
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(shared.mu);
      const auto wake = progress
                            ? std::min(deadline, std::chrono::steady_clock::now() +
                                                     std::chrono::milliseconds(kRecoveryProgressMs))
                            : deadline;
      done = shared.recovery_changed.wait_until(lock, wake, [&] {
        recovery = Recovery{shared.agent->membership().joined() || shared.no_seed_but_self, 0, 0};
        for (const protocol::MemberStatus& member :
             shared.agent->membership().View(shared.NowMs())) {
          if (member.node_id == self_id || member.state != protocol::MemberState::kAlive) continue;
          ++recovery.peers_alive;
          recovery.peers_synced += shared.synced.contains(member.node_id) ? 1 : 0;
        }
        return recovery.joined && recovery.peers_synced == recovery.peers_alive;
      });
      // The Limiter serves next: it knows the members now, not a round later.
      shared.limiter->SetClusterSize(shared.agent->membership().cluster_size());
    }
    if (done || std::chrono::steady_clock::now() >= deadline) return recovery;
    progress(recovery);
  }
}

void Gossip::Leave(int64_t timeout_ms) {
  Impl& impl = *impl_;
  if (!impl.thread.joinable()) return;
  std::promise<void> sent;
  std::future<void> done = sent.get_future();
  asio::post(impl.io, [&impl, &sent, timeout_ms] {
    impl.Round(/*flush_deferred=*/true);  // the admissions that wait, before the peers drop it
    {
      std::lock_guard<std::mutex> lock(impl.shared.mu);
      impl.shared.agent->membership().Leave(impl.shared.WallMs());
    }
    impl.probes->SendTable();
    impl.leave_deadline_ms = impl.shared.NowMs() + timeout_ms;
    impl.leave_done = &sent;
    impl.EndRest();  // the rounds that finish the leave come every interval
  });
  done.wait();  // a round sets it by the deadline, or Shutdown does
  Stop();
}

Status Gossip::ForgetMember(NodeId member, bool* forgotten) {
  Impl& impl = *impl_;
  *forgotten = false;
  if (!impl.thread.joinable()) return Status::Unavailable("gossip is not running");
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  asio::post(impl.io, [&impl, member, forgotten, result] {
    uint64_t incarnation = 0;
    Status status;
    {
      std::lock_guard<std::mutex> lock(impl.shared.mu);
      status = impl.shared.agent->membership().Forget(member, forgotten);
      for (const protocol::MemberRecord& record : impl.shared.agent->membership().Records()) {
        if (record.node_id == member) incarnation = record.incarnation;
      }
    }
    if (status.ok() && *forgotten) {
      spdlog::warn("forgetting member node {}: an operator says it is gone for good", member);
      // What it kept back is lost: its run ends here, as a crash's does.
      impl.shared.member_losses.Restarted(member, incarnation, impl.shared.WallMs());
      impl.probes->SendTable();  // every peer hears of it now, not with the probes
      impl.FollowMembership(impl.shared.NowMs());
    }
    result->set_value(status);
  });
  if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    return Status::Unavailable("the gossip thread did not answer within 5 s");
  }
  return done.get();
}

void Gossip::Stop() {
  Impl& impl = *impl_;
  if (!impl.thread.joinable()) return;
  asio::post(impl.io, [&impl] { impl.Shutdown(); });
  impl.thread.join();
}

void Gossip::AddStats(protocol::StatsReply* stats) const {
  const GossipShared& shared = impl_->shared;
  const auto get = [](const std::atomic<uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  stats->gossip_rounds = get(shared.rounds);
  stats->gossip_bytes_sent = get(shared.bytes_sent);
  stats->gossip_bytes_received = get(shared.bytes_received);
  stats->gossip_delta_bytes_sent = get(shared.delta_bytes_sent);
  stats->gossip_delta_entries_sent = get(shared.delta_entries_sent);
  stats->gossip_full_syncs_sent = get(shared.full_syncs_sent);
  stats->gossip_full_syncs_received = get(shared.full_syncs_received);
  stats->gossip_entries_merged = get(shared.entries_merged);
  stats->gossip_entries_rejected = get(shared.entries_rejected);
  stats->gossip_sessions_refused = get(shared.sessions_refused);
  stats->gossip_digests_sent = get(shared.digests_sent);
  stats->gossip_ranges_sent = get(shared.ranges_sent);
  const int64_t now_ms = shared.NowMs();
  std::lock_guard<std::mutex> lock(shared.mu);
  stats->peer_links.clear();
  for (const auto& [address, link] : shared.links) stats->peer_links.push_back(link);
  if (shared.agent) stats->members = shared.agent->membership().View(now_ms);
  stats->peer_nodes.clear();
  for (const auto& [node_id, node] : shared.nodes) {
    protocol::PeerNodeStatus& status = stats->peer_nodes.emplace_back(node.status);
    status.last_heard_ms_ago = static_cast<uint64_t>(now_ms - node.last_heard_ms);
  }
}

}  // namespace tally
