#include "node/gossip/membership.h"

#include <algorithm>
#include <tuple>

namespace tally {
namespace {

// Which of two records about one member is newer: a later incarnation, or
// in one incarnation a later heartbeat, or the same beat marked left.
bool Newer(const protocol::MemberRecord& a, const protocol::MemberRecord& b) {
  return std::tuple(a.incarnation, a.heartbeat, a.left) >
         std::tuple(b.incarnation, b.heartbeat, b.left);
}

}  // namespace

Membership::Membership(const Options& options, int64_t now_ms)
    : self_id_(options.self.node_id),
      suspect_after_ms_(options.suspect_after_ms),
      dead_after_ms_(options.dead_after_ms) {
  Member& self = members_[self_id_];
  self.record = options.self;
  self.advanced_ms = now_ms;
}

void Membership::Beat(int64_t wall_ms) {
  protocol::MemberRecord& self = members_.at(self_id_).record;
  ++self.heartbeat;
  self.heartbeat_wall_ms = wall_ms;
}

void Membership::Leave(int64_t wall_ms) {
  members_.at(self_id_).record.left = true;
  Beat(wall_ms);
}

Status Membership::Forget(NodeId member, bool* forgotten) {
  *forgotten = false;
  if (member == self_id_) {
    return Status::InvalidArgument("node " + std::to_string(member) +
                                   " is this node: stop it to leave the cluster");
  }
  const auto it = members_.find(member);
  if (it == members_.end()) {
    return Status::InvalidArgument("no member " + std::to_string(member) +
                                   " in this node's view of the cluster");
  }
  protocol::MemberRecord& record = it->second.record;
  if (record.left) return Status::OK();
  record.left = true;
  record.forgotten = true;
  *forgotten = true;
  return Status::OK();
}

void Membership::Merge(std::span<const protocol::MemberRecord> records, int64_t now_ms,
                       int64_t wall_ms, NodeId sender, std::vector<Restart>* restarts) {
  for (const protocol::MemberRecord& record : records) {
    if (record.node_id == self_id_) {
      const protocol::MemberRecord& self = members_.at(self_id_).record;
      if (restarts && record.incarnation < self.incarnation && !record.left) {
        restarts->push_back({self_id_, self.incarnation});
      }
      continue;
    }
    const auto [it, added] = members_.try_emplace(record.node_id);
    Member& member = it->second;
    // A sample even when a relayed copy of the record came first.
    if (record.node_id == sender && record.heartbeat_wall_ms != 0) {
      member.offset_samples[member.offsets_seen % kOffsetSamples] =
          record.heartbeat_wall_ms - wall_ms;
      ++member.offsets_seen;
    }
    if (!added && !Newer(record, member.record)) continue;
    // A newer run, or the same run forgotten by an operator (gone for
    // good): what the run it replaces kept back is lost.
    if (restarts && !added && !member.record.left &&
        (record.incarnation > member.record.incarnation || record.forgotten)) {
      restarts->push_back({record.node_id, record.incarnation});
    }
    member.record = record;
    member.advanced_ms = now_ms;
    member.lag_ms = wall_ms - record.heartbeat_wall_ms;
  }
}

std::optional<int64_t> Membership::ClockOffsetMs(const Member& member) {
  if (member.offsets_seen == 0) return std::nullopt;
  const size_t samples = std::min(member.offsets_seen, kOffsetSamples);
  return *std::max_element(member.offset_samples.begin(), member.offset_samples.begin() + samples);
}

std::vector<protocol::MemberStatus> Membership::TakeClockChanges(int64_t max_offset_ms,
                                                                 int64_t now_ms) {
  std::vector<protocol::MemberStatus> changes;
  for (auto& [id, member] : members_) {
    const std::optional<int64_t> offset_ms = ClockOffsetMs(member);
    if (!offset_ms) continue;
    const bool off = *offset_ms > max_offset_ms || *offset_ms < -max_offset_ms;
    if (off == member.clock_off_reported) continue;
    member.clock_off_reported = off;
    changes.push_back(StatusOf(member, now_ms));
  }
  return changes;
}

std::vector<protocol::MemberRecord> Membership::Records() const {
  std::vector<protocol::MemberRecord> records;
  records.reserve(members_.size());
  for (const auto& [id, member] : members_) records.push_back(member.record);
  return records;
}

protocol::MemberStatus Membership::StatusOf(const Member& member, int64_t now_ms) const {
  protocol::MemberStatus status;
  status.node_id = member.record.node_id;
  status.address = member.record.address;
  status.incarnation = member.record.incarnation;
  status.heartbeat = member.record.heartbeat;
  const bool self = member.record.node_id == self_id_;
  const int64_t silent_ms = self ? 0 : now_ms - member.advanced_ms;
  status.last_heard_ms_ago = static_cast<uint64_t>(silent_ms > 0 ? silent_ms : 0);
  status.lag_ms = self ? 0 : member.lag_ms;
  if (const std::optional<int64_t> offset_ms = ClockOffsetMs(member)) {
    status.clock_offset_known = true;
    status.clock_offset_ms = *offset_ms;
  }
  if (member.record.left) {
    status.state = protocol::MemberState::kLeft;
  } else if (silent_ms >= dead_after_ms_) {
    status.state = protocol::MemberState::kDead;
  } else if (silent_ms >= suspect_after_ms_) {
    status.state = protocol::MemberState::kSuspect;
  } else {
    status.state = protocol::MemberState::kAlive;
  }
  return status;
}

std::vector<protocol::MemberStatus> Membership::View(int64_t now_ms) const {
  std::vector<protocol::MemberStatus> view;
  view.reserve(members_.size());
  for (const auto& [id, member] : members_) view.push_back(StatusOf(member, now_ms));
  return view;
}

std::vector<protocol::MemberStatus> Membership::TakeChanges(int64_t now_ms) {
  std::vector<protocol::MemberStatus> changes;
  for (auto& [id, member] : members_) {
    protocol::MemberStatus status = StatusOf(member, now_ms);
    if (member.reported == status.state) continue;
    member.reported = status.state;
    changes.push_back(std::move(status));
  }
  return changes;
}

size_t Membership::cluster_size() const {
  size_t size = 0;
  for (const auto& [id, member] : members_) size += member.record.left ? 0 : 1;
  return size;
}

}  // namespace tally
