#include "node/sim/sim_node.h"

#include <algorithm>

#include "node/gossip/round_deltas.h"
#include "protocol/peer_codec.h"

namespace tally::sim {
namespace {

protocol::FrameLimits PeerLimits() {
  protocol::FrameLimits limits;
  limits.max_frame_bytes = 4 << 20;
  return limits;
}

}  // namespace

std::string StoreKey(const KeySnapshot& snapshot) {
  return snapshot.key + '/' + std::to_string(static_cast<int>(snapshot.algorithm)) + '/' +
         std::to_string(snapshot.window_ms);
}

SimNode::SimNode(const Config& config, EventQueue* events, SimStore* store, int64_t clock_offset_ms,
                 Send send, Merged merged)
    : config_(config),
      events_(events),
      store_(store),
      send_(std::move(send)),
      clock_(events, clock_offset_ms),
      merger_(std::move(merged)) {
  incarnation_ = static_cast<uint64_t>(WallMs());
  // As tallyd sets them up for a cluster (node/bin/tallyd_main.cc).
  Limiter::Options options;
  options.node_id = config.id;
  options.clock = &clock_;
  options.track_changes = store != nullptr;
  options.replicate = true;
  options.gossip_max_delay_ms = config.escrow ? 0 : config.gossip_max_delay_ms;
  options.escrow_epoch_ms = config.escrow ? 4 * config.interval_ms : 0;
  options.share_delivery_ms = std::max<int64_t>(1, config.interval_ms / 10);
  options.share_wait_ms = config.plain_gossip ? 0 : config.interval_ms + options.share_delivery_ms;
  options.partition_share = config.partition_share;
  options.key_hash_seed = config.key_hash_seed;
  limiter_ = std::make_unique<Limiter>(options);
  limiter_->SetRoundWanted([this] { round_clock_.BringForward(NowMs()); });
  limiter_->SetGossipWork([this] {
    if (round_clock_.resting()) EndRest();
  });
  bool crashed = false;
  std::vector<CrashLoss> stored_losses;
  if (store_ != nullptr) {
    crashed = store_->serving;
    stored_losses = store_->crash_losses;
    for (const auto& [name, snapshot] : store_->records) {
      (void)limiter_->Restore(snapshot);  // what has expired since is ignored
    }
    store_->serving = true;
  }
  protocol::MemberRecord self;
  self.node_id = config.id;
  self.address = "sim-" + std::to_string(config.id);
  self.incarnation = incarnation_;
  agent_.emplace(
      MemberAgent::Options{
          Membership::Options{self, config.dead_after_ms - config.suspect_after_ms},
          Prober::Options{config.id, config.membership_interval_ms, config.suspect_after_ms, 3,
                          config.id ^ incarnation_}},
      NowMs());
  losses_.emplace(limiter_.get(), [this](std::span<const CrashLoss> losses) {
    if (store_ != nullptr) store_->crash_losses.assign(losses.begin(), losses.end());
  });
  losses_->Start(stored_losses, config.id, incarnation_, crashed, WallMs());
  started_ms_ = NowMs();
  round_clock_ = RoundClock(config.interval_ms, NowMs());
  next_digests_at_ms_ =
      DigestRefMs(WallMs(), config.anti_entropy_interval_ms) + config.anti_entropy_interval_ms;
  FollowMembership();
  CheckRecovered();
}

void SimNode::Round() {
  const int64_t now_ms = NowMs();
  round_clock_.Begin(now_ms);
  std::vector<NodeId> relayers;
  if (config_.relay) {
    relayers.reserve(up_.size() + 1);
    relayers.push_back(config_.id);
    relayers.insert(relayers.end(), up_.begin(), up_.end());
  }
  const RoundDeltas deltas = CollectRoundDeltas(*limiter_, relayers, config_.max_frame_bytes,
                                                std::exchange(flush_deferred_, false));
  for (const auto& [relayer, delta] : deltas.to_relayer) {
    SendFrames(relayer, delta.frames);
    counters_.delta_entries_sent += delta.entries;
  }
  // One copy of each frame, whatever the number of peers.
  std::vector<Frame> to_every_peer;
  for (const std::string& frame : deltas.to_every_peer.frames) {
    to_every_peer.push_back(std::make_shared<const std::string>(frame));
  }
  const bool all_up = up_.size() == links_.size();
  if (!to_every_peer.empty()) {
    for (const NodeId peer : up_) {
      for (const Frame& frame : to_every_peer) send_(peer, frame);
      counters_.delta_entries_sent += deltas.to_every_peer.entries;
    }
  }
  std::vector<MemberAgent::Outgoing> out;
  if (!leaving_) {
    agent_->Tick(
        now_ms, [this](NodeId member) { return link_up(member); }, &out);
  }
  Deliver(out);
  FollowMembership();
  RunRechecks();
  const int64_t wall_ms = WallMs();
  if (wall_ms >= next_digests_at_ms_ && !leaving_) {
    const int64_t ref_ms = DigestRefMs(wall_ms, config_.anti_entropy_interval_ms);
    next_digests_at_ms_ = ref_ms + config_.anti_entropy_interval_ms;
    SendDigests(ref_ms);
  }
  CheckRecovered();
  const int64_t recheck_in_ms = rechecks_.empty() ? INT64_MAX : rechecks_.front().due_ms - now_ms;
  round_clock_.End(deltas.to_every_peer.entries > 0 || !deltas.to_relayer.empty() || !all_up ||
                       leaving_ || agent_->busy() || !serving_,
                   {agent_->next_ping_in_ms(now_ms), deltas.next_due_in_ms,
                    next_digests_at_ms_ - wall_ms, recheck_in_ms});
}

void SimNode::Receive(NodeId from, std::string_view frame) {
  protocol::PeerMessage message;
  const auto bytes = std::as_bytes(std::span(frame.data(), frame.size()));
  if (!protocol::DecodePeerMessage(bytes, PeerLimits(), &message).ok()) return;
  const int64_t now_ms = NowMs(), wall_ms = WallMs();
  switch (message.kind) {
    case protocol::PeerMessageKind::kState: {
      uint64_t merged = 0;
      (void)merger_.Merge(
          *limiter_, from, message, config_.relay, [](const Status&) {}, &merged);
      break;
    }
    case protocol::PeerMessageKind::kMembers: {
      std::vector<Membership::Restart> restarts;
      std::vector<MemberAgent::Outgoing> out;
      agent_->Receive(from, message, now_ms, wall_ms, &restarts, &out);
      Deliver(out);
      for (const Membership::Restart& restart : restarts) {
        losses_->Restarted(restart.node_id, restart.incarnation, wall_ms);
        flush_deferred_ = true;
      }
      if (!restarts.empty()) EndRest();
      losses_->Merge(message.losses, wall_ms);
      break;
    }
    case protocol::PeerMessageKind::kResync:
      if (auto link = links_.find(from); link != links_.end() && link->second.up) {
        link->second.sync.StartFullSync();
        PumpSync(from, link->second);
      }
      break;
    case protocol::PeerMessageKind::kDigests: ReceiveDigests(from, message); break;
    case protocol::PeerMessageKind::kRanges:
      if (auto link = links_.find(from); link != links_.end() && link->second.up) {
        link->second.sync.AnswerReceived(message.want, message.later);
        PumpSync(from, link->second);
      }
      break;
    case protocol::PeerMessageKind::kSyncDone:
      synced_from_.insert(from);
      // Every member synced, maybe: worth a look at the view (else the next round looks).
      if (synced_from_.size() + 1 >= cluster_size_) CheckRecovered();
      break;
    default: break;
  }
}

void SimNode::LinkUp(NodeId peer, uint64_t peer_incarnation) {
  const auto found = links_.find(peer);
  if (found == links_.end() || found->second.up) return;
  Link& link = found->second;
  link.up = true;
  up_.insert(std::lower_bound(up_.begin(), up_.end(), peer), peer);
  link.peer_incarnation = peer_incarnation;
  send_(peer, TableFrame());
  link.sync.Connected();  // a new connection gets everything
  PumpSync(peer, link);
  if (const auto pending = pending_answers_.find(peer); pending != pending_answers_.end()) {
    std::string frame;
    protocol::EncodeRanges(
        std::vector<uint32_t>(pending->second.want.begin(), pending->second.want.end()),
        std::vector<uint32_t>(pending->second.later.begin(), pending->second.later.end()), &frame);
    pending_answers_.erase(pending);
    SendTo(peer, std::move(frame));
  }
  std::vector<MemberAgent::Outgoing> out;
  agent_->LinkUp(peer, &out);
  Deliver(out);
}

Frame SimNode::TableFrame() {
  if (!table_ || table_version_ != agent_->membership().records_version()) {
    table_version_ = agent_->membership().records_version();
    auto table = std::make_shared<std::string>();
    protocol::EncodeMembers(agent_->membership().Records(), losses_->crash_losses(), nullptr,
                            table.get());
    table_ = std::move(table);
  }
  return table_;
}

void SimNode::LinkDown(NodeId peer) {
  const auto found = links_.find(peer);
  if (found == links_.end() || !found->second.up) return;
  found->second.up = false;
  up_.erase(std::lower_bound(up_.begin(), up_.end(), peer));
  went_down_.push_back(peer);
  found->second.sync.Disconnected();
  ++link_events_;
  EndRest();
}

void SimNode::SessionUp(NodeId peer, uint64_t incarnation) { losses_->Alive(peer, incarnation); }

void SimNode::Flush(size_t max_records) {
  if (store_ == nullptr) return;
  size_t written = 0;
  limiter_->CollectChanges([&](const KeySnapshot& snapshot) {
    if (written++ < max_records) store_->records[StoreKey(snapshot)] = snapshot;
  });
}

void SimNode::Leave() {
  agent_->membership().Leave(WallMs());
  leaving_ = true;
  flush_deferred_ = true;
  const Frame table = TableFrame();
  for (const NodeId peer : up_) send_(peer, table);
  Round();
  Flush();
  if (store_ != nullptr) store_->serving = false;
}

Status SimNode::Check(std::string_view key, const LimitSpec& spec, uint64_t cost,
                      Decision* decision) {
  if (!serving_) return Status::Unavailable("recovering");
  return limiter_->Check(key, spec, cost, decision);
}

std::set<NodeId> SimNode::WantedLinks() const {
  std::set<NodeId> wanted;
  for (const NodeId seed : config_.seeds) {
    if (seed != config_.id) wanted.insert(seed);
  }
  for (const protocol::MemberRecord& record : records_) {
    if (record.node_id != config_.id && !record.left) wanted.insert(record.node_id);
  }
  return wanted;
}

bool SimNode::link_up(NodeId peer) const {
  const auto found = links_.find(peer);
  return found != links_.end() && found->second.up;
}

void SimNode::SendFrames(NodeId to, const std::vector<std::string>& frames) {
  for (const std::string& frame : frames) send_(to, std::make_shared<const std::string>(frame));
}

void SimNode::SendTo(NodeId to, std::string frame) {
  send_(to, std::make_shared<const std::string>(std::move(frame)));
}

void SimNode::Deliver(const std::vector<MemberAgent::Outgoing>& out) {
  for (const MemberAgent::Outgoing& message : out) {
    std::optional<protocol::Probe> probe = message.probe;
    if (probe) probe->wall_ms = WallMs();
    auto frame = std::make_shared<std::string>();
    protocol::EncodeMembers(message.records, losses_->crash_losses(), probe ? &*probe : nullptr,
                            frame.get());
    if (message.to == MemberAgent::kEveryone) {
      for (const NodeId peer : up_) send_(peer, frame);
    } else if (link_up(message.to)) {
      send_(message.to, frame);
    }  // else unanswered, as if lost: the probe's timeout tells
  }
}

void SimNode::FollowMembership() {
  const Membership& membership = agent_->membership();
  if (membership.records_version() != followed_version_) {
    followed_version_ = membership.records_version();
    records_ = membership.Records();
    cluster_size_ = membership.cluster_size();
    const std::set<NodeId> wanted = WantedLinks();
    std::erase_if(links_, [&](const auto& entry) { return !wanted.contains(entry.first); });
    std::erase_if(up_, [&](NodeId peer) { return !wanted.contains(peer); });
    for (const NodeId peer : wanted) links_.try_emplace(peer);
    ++link_events_;
  }
  const int64_t now_ms = NowMs(), wall_ms = WallMs();
  std::vector<MemberAgent::Outgoing> out;
  // In order of id, each once, as a pass over the links would find them.
  std::sort(went_down_.begin(), went_down_.end());
  went_down_.erase(std::unique(went_down_.begin(), went_down_.end()), went_down_.end());
  for (const NodeId peer : std::exchange(went_down_, {})) {
    const auto link = links_.find(peer);
    if (link == links_.end() || link->second.up) continue;
    agent_->LinkDown(peer, now_ms, &out);
    const auto record = std::find_if(records_.begin(), records_.end(),
                                     [peer](const auto& r) { return r.node_id == peer; });
    if (record != records_.end()) {
      losses_->LinkWentDown(*record, link->second.peer_incarnation, wall_ms);
    }
  }
  Deliver(out);
  losses_->Follow(records_, config_.id, wall_ms);
  limiter_->SetClusterView(cluster_size_, links_.size() - up_.size());
}

void SimNode::PumpSync(NodeId peer, Link& link) {
  std::vector<std::string> frames;
  while (link.up) {
    frames.clear();
    const LinkSync::Piece piece = link.sync.Next(*limiter_, config_.max_frame_bytes, &frames);
    if (piece == LinkSync::Piece::kNothing) return;
    if (piece == LinkSync::Piece::kSyncDone) ++counters_.full_syncs_sent;
    if (piece == LinkSync::Piece::kRange) ++counters_.ranges_sent;
    SendFrames(peer, frames);
  }
}

void SimNode::SendDigests(int64_t ref_ms) {
  const std::vector<Limiter::RangeVersion> versions =
      AllRangeVersions(*limiter_, QuietMs(config_.interval_ms));
  std::vector<uint32_t> due_everywhere = digest_ledger_.Due(versions);
  std::vector<std::pair<NodeId, std::vector<uint32_t>>> due;
  std::vector<bool> wanted(Limiter::range_count());
  for (const auto& [peer, link] : links_) {
    if (!link.up) continue;
    std::vector<uint32_t> ranges = link.sync.DigestsDue(due_everywhere, versions);
    for (const uint32_t range : ranges) wanted[range] = true;
    due.emplace_back(peer, std::move(ranges));
  }
  IntervalDigests interval(wanted);
  for (const ShardRun& run : interval.runs) interval.Compute(*limiter_, run, ref_ms);
  for (auto& [peer, peer_ranges] : due) {
    interval.KeepCurrent(&peer_ranges);
    Link& link = links_.at(peer);
    if (peer_ranges.empty() || link.sync.syncing()) continue;
    const std::vector<protocol::RangeDigest> message =
        link.sync.TakeDigests(peer_ranges, interval.digests);
    std::string frame;
    protocol::EncodeDigests(ref_ms, message, &frame);
    counters_.digests_sent += message.size();
    SendTo(peer, std::move(frame));
  }
  interval.KeepCurrent(&due_everywhere);
  digest_ledger_.Sent(due_everywhere, versions);
}

void SimNode::ReceiveDigests(NodeId from, protocol::PeerMessage& message) {
  std::vector<protocol::RangeDigest>& digests = message.digests;
  std::erase_if(digests, [](const protocol::RangeDigest& digest) {
    return digest.range >= Limiter::range_count();
  });
  std::sort(digests.begin(), digests.end(),
            [](const auto& a, const auto& b) { return a.range < b.range; });
  std::vector<uint32_t> again;  // differ, or not quiet here: both are compared again
  CompareDigests(*limiter_, QuietMs(config_.interval_ms), message.ref_ms, digests, &again, &again);
  if (again.empty()) return;
  std::sort(again.begin(), again.end());
  Recheck recheck{from, message.ref_ms, NowMs() + RecheckMs(config_.interval_ms), {}};
  for (const protocol::RangeDigest& digest : digests) {
    if (std::binary_search(again.begin(), again.end(), digest.range)) {
      recheck.digests.push_back(digest);
    }
  }
  rechecks_.push_back(std::move(recheck));
  EndRest();
}

void SimNode::RunRechecks() {
  const int64_t now_ms = NowMs();
  while (!rechecks_.empty() && rechecks_.front().due_ms <= now_ms) {
    Recheck recheck = std::move(rechecks_.front());
    rechecks_.erase(rechecks_.begin());
    std::vector<uint32_t> want, later;
    CompareDigests(*limiter_, QuietMs(config_.interval_ms), recheck.ref_ms, recheck.digests, &want,
                   &later);
    ask_budget_.Limit(recheck.ref_ms, recheck.peer, &want, &later);
    if (config_.break_repair) want.clear();  // the simulation's own test: no repair
    if (want.empty() && later.empty()) continue;
    if (link_up(recheck.peer)) {
      std::string frame;
      protocol::EncodeRanges(want, later, &frame);
      SendTo(recheck.peer, std::move(frame));
    } else {
      PendingAnswer& pending = pending_answers_[recheck.peer];  // sent when the link comes up
      pending.want.insert(want.begin(), want.end());
      pending.later.insert(later.begin(), later.end());
    }
  }
}

void SimNode::CheckRecovered() {
  if (serving_) return;
  const Membership& membership = agent_->membership();
  bool no_seed_but_self = true;
  for (const NodeId seed : config_.seeds) no_seed_but_self = no_seed_but_self && seed == config_.id;
  bool recovered = membership.joined() || no_seed_but_self;
  if (recovered) {
    for (const protocol::MemberStatus& member : membership.View(NowMs())) {
      if (member.node_id != config_.id && member.state == protocol::MemberState::kAlive &&
          !synced_from_.contains(member.node_id)) {
        recovered = false;
        break;
      }
    }
  }
  serving_ = recovered || NowMs() - started_ms_ >= config_.recovery_timeout_ms;
}

}  // namespace tally::sim
