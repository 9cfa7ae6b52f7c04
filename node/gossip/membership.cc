#include "node/gossip/membership.h"

#include <algorithm>
#include <bit>
#include <tuple>

namespace tally {
namespace {

using protocol::MemberRecord;
using protocol::MemberState;

// How grave a record's state is, at one version: a graver one is newer.
int Gravity(const MemberRecord& record) {
  if (record.left) return record.forgotten ? 4 : 3;
  return static_cast<int>(record.state);  // alive 0, suspect 1, dead 2
}

// Which of two records about one member is newer: a later incarnation, or
// in one incarnation a later version, or at one version the graver state.
bool Newer(const MemberRecord& a, const MemberRecord& b) {
  return std::tuple(a.incarnation, a.heartbeat, Gravity(a)) >
         std::tuple(b.incarnation, b.heartbeat, Gravity(b));
}

// Orders the index's slots against an id.
constexpr auto IdBelow = [](const auto& slot, NodeId id) { return slot.id < id; };

}  // namespace

Membership::Membership(const Options& options, int64_t now_ms)
    : self_id_(options.self.node_id), suspicion_ms_(options.suspicion_ms) {
  size_t hint = 0;
  bool added = false;
  self_ = FindOrAdd(self_id_, now_ms, &hint, &added);
  self_->record = options.self;
  self_->record.state = MemberState::kAlive;
}

Membership::Member* Membership::Find(NodeId id) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), id, IdBelow);
  return it != index_.end() && it->id == id ? it->member : nullptr;
}

Membership::Member* Membership::FindOrAdd(NodeId id, int64_t now_ms, size_t* hint, bool* added) {
  auto from = index_.begin();
  // Past the last one found, when it is below: in a run of ascending ids the
  // next is found there at once.
  if (*hint < index_.size() && index_[*hint].id < id) from += static_cast<ptrdiff_t>(*hint + 1);
  auto it = from == index_.end() || from->id >= id
                ? from
                : std::lower_bound(from, index_.end(), id, IdBelow);
  *added = it == index_.end() || it->id != id;
  if (*added) {
    Member& member = storage_.emplace_back();
    member.record.node_id = id;
    member.heard_ms = now_ms;
    it = index_.insert(it, Slot{id, &member});
  }
  *hint = static_cast<size_t>(it - index_.begin());
  return it->member;
}

void Membership::Leave(int64_t wall_ms) {
  self_->record.left = true;
  ++self_->record.heartbeat;
  self_->record.heartbeat_wall_ms = wall_ms;
  Queue(self_);
}

Status Membership::Forget(NodeId member, bool* forgotten) {
  *forgotten = false;
  if (member == self_id_) {
    return Status::InvalidArgument("node " + std::to_string(member) +
                                   " is this node: stop it to leave the cluster");
  }
  Member* const found = Find(member);
  if (found == nullptr) {
    return Status::InvalidArgument("no member " + std::to_string(member) +
                                   " in this node's view of the cluster");
  }
  MemberRecord& record = found->record;
  if (record.left) return Status::OK();
  record.left = true;
  record.forgotten = true;
  *forgotten = true;
  Queue(found);
  return Status::OK();
}

bool Membership::Refute(const MemberRecord& record, int64_t wall_ms) {
  Member& self = *self_;
  if (self.record.left || record.incarnation != self.record.incarnation ||
      record.heartbeat < self.record.heartbeat ||
      (record.state == MemberState::kAlive && !record.left)) {
    return false;
  }
  self.record.heartbeat = record.heartbeat + 1;
  self.record.heartbeat_wall_ms = wall_ms;
  Queue(&self);
  return true;
}

bool Membership::Merge(std::span<const MemberRecord> records, int64_t now_ms, int64_t wall_ms,
                       std::vector<Restart>* restarts) {
  bool refuted = false;
  size_t hint = 0;
  for (const MemberRecord& record : records) {
    if (record.node_id == self_id_) {
      const MemberRecord& self = self_->record;
      // Once per previous run: its records keep coming as its suspicion and
      // death spread, and each report sends on what waits (Gossip).
      if (restarts && record.incarnation < self.incarnation && !record.left &&
          record.incarnation > previous_run_reported_) {
        previous_run_reported_ = record.incarnation;
        restarts->push_back({self_id_, self.incarnation});
      }
      refuted = Refute(record, wall_ms) || refuted;
      continue;
    }
    bool added = false;
    Member& member = *FindOrAdd(record.node_id, now_ms, &hint, &added);
    if (!added && !Newer(record, member.record)) continue;
    // A newer run, or the same run forgotten by an operator (gone for
    // good): what the run it replaces kept back is lost.
    if (restarts && !added && !member.record.left &&
        (record.incarnation > member.record.incarnation || record.forgotten)) {
      restarts->push_back({record.node_id, record.incarnation});
    }
    const bool newly_suspect = record.state == MemberState::kSuspect &&
                               (added || member.record.state != MemberState::kSuspect ||
                                member.record.heartbeat != record.heartbeat ||
                                member.record.incarnation != record.incarnation);
    member.record = record;
    if (newly_suspect) member.suspected_ms = now_ms;
    ++records_version_;
    if (!added) Queue(&member);
  }
  return refuted;
}

void Membership::HeardFrom(NodeId sender, int64_t sender_wall_ms, int64_t now_ms, int64_t wall_ms) {
  Member* const found = Find(sender);
  if (found == nullptr || sender == self_id_) return;
  Member& member = *found;
  member.heard_ms = now_ms;
  if (sender_wall_ms == 0) return;
  member.lag_ms = wall_ms - sender_wall_ms;
  member.offset_samples[member.offsets_seen % kOffsetSamples] = sender_wall_ms - wall_ms;
  ++member.offsets_seen;
}

void Membership::HeardThrough(NodeId member, int64_t now_ms) {
  Member* const found = Find(member);
  if (found != nullptr && member != self_id_) found->heard_ms = now_ms;
}

void Membership::Suspect(NodeId member, int64_t now_ms) {
  Member* const found = Find(member);
  if (found == nullptr || member == self_id_) return;
  MemberRecord& record = found->record;
  if (record.left || record.state != MemberState::kAlive) return;
  record.state = MemberState::kSuspect;
  found->suspected_ms = now_ms;
  Queue(found);
}

void Membership::Expire(int64_t now_ms) {
  for (const Slot& slot : index_) {
    Member& member = *slot.member;
    if (member.record.left || member.record.state != MemberState::kSuspect ||
        now_ms - member.suspected_ms < suspicion_ms_) {
      continue;
    }
    member.record.state = MemberState::kDead;
    Queue(&member);
  }
}

void Membership::Postpone(int64_t stall_ms) {
  for (const Slot& slot : index_) {
    if (slot.member->record.state == MemberState::kSuspect) slot.member->suspected_ms += stall_ms;
  }
}

bool Membership::AnySuspect() const {
  return std::any_of(index_.begin(), index_.end(), [](const Slot& slot) {
    return !slot.member->record.left && slot.member->record.state == MemberState::kSuspect;
  });
}

void Membership::Queue(Member* member) {
  ++records_version_;
  const int log2_members = std::bit_width(index_.size() + 1);  // ceil(log2(n + 1)), about
  if (member->transmits_left == 0) ++queued_;
  member->transmits_left = kTransmitFactor * log2_members;
  member->transmits_done = 0;
}

std::vector<MemberRecord> Membership::TakeUpdates(size_t max) {
  if (queued_ == 0) return {};
  std::vector<Member*> queued;
  for (const Slot& slot : index_) {
    if (slot.member->transmits_left > 0) queued.push_back(slot.member);
  }
  const size_t count = std::min(max, queued.size());
  std::partial_sort(queued.begin(), queued.begin() + static_cast<ptrdiff_t>(count), queued.end(),
                    [](const Member* a, const Member* b) {
                      return std::tuple(a->transmits_done, a->record.node_id) <
                             std::tuple(b->transmits_done, b->record.node_id);
                    });
  std::vector<MemberRecord> updates;
  updates.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (--queued[i]->transmits_left == 0) --queued_;
    ++queued[i]->transmits_done;
    updates.push_back(queued[i]->record);
  }
  return updates;
}

std::vector<MemberRecord> Membership::RecordsFor(NodeId to, bool ack, size_t max) {
  std::vector<MemberRecord> records = TakeUpdates(max);
  const Member* const receiver = Find(to);
  if (receiver != nullptr && to != self_id_ &&
      (receiver->record.state != MemberState::kAlive || receiver->record.left)) {
    records.push_back(receiver->record);
  }
  if (ack) records.push_back(self_->record);
  return records;
}

std::vector<NodeId> Membership::Probeable() const {
  std::vector<NodeId> probeable;
  for (const auto& [id, member] : index_) {
    if (id != self_id_ && !member->record.left && member->record.state != MemberState::kDead) {
      probeable.push_back(id);
    }
  }
  return probeable;
}

std::optional<int64_t> Membership::ClockOffsetMs(const Member& member) {
  if (member.offsets_seen == 0) return std::nullopt;
  const size_t samples = std::min(member.offsets_seen, kOffsetSamples);
  return *std::max_element(member.offset_samples.begin(), member.offset_samples.begin() + samples);
}

std::vector<protocol::MemberStatus> Membership::TakeClockChanges(int64_t max_offset_ms,
                                                                 int64_t now_ms) {
  std::vector<protocol::MemberStatus> changes;
  for (const Slot& slot : index_) {
    Member& member = *slot.member;
    const std::optional<int64_t> offset_ms = ClockOffsetMs(member);
    if (!offset_ms) continue;
    const bool off = *offset_ms > max_offset_ms || *offset_ms < -max_offset_ms;
    if (off == member.clock_off_reported) continue;
    member.clock_off_reported = off;
    changes.push_back(StatusOf(member, now_ms));
  }
  return changes;
}

std::vector<MemberRecord> Membership::Records() const {
  std::vector<MemberRecord> records;
  records.reserve(index_.size());
  for (const Slot& slot : index_) records.push_back(slot.member->record);
  return records;
}

protocol::MemberStatus Membership::StatusOf(const Member& member, int64_t now_ms) const {
  protocol::MemberStatus status;
  status.node_id = member.record.node_id;
  status.address = member.record.address;
  status.incarnation = member.record.incarnation;
  status.heartbeat = member.record.heartbeat;
  const bool self = member.record.node_id == self_id_;
  const int64_t silent_ms = self ? 0 : now_ms - member.heard_ms;
  status.last_heard_ms_ago = static_cast<uint64_t>(silent_ms > 0 ? silent_ms : 0);
  status.lag_ms = self ? 0 : member.lag_ms;
  if (const std::optional<int64_t> offset_ms = ClockOffsetMs(member)) {
    status.clock_offset_known = true;
    status.clock_offset_ms = *offset_ms;
  }
  status.state = member.record.left ? MemberState::kLeft : member.record.state;
  return status;
}

std::vector<protocol::MemberStatus> Membership::View(int64_t now_ms) const {
  std::vector<protocol::MemberStatus> view;
  view.reserve(index_.size());
  for (const Slot& slot : index_) view.push_back(StatusOf(*slot.member, now_ms));
  return view;
}

std::vector<protocol::MemberStatus> Membership::TakeChanges(int64_t now_ms) {
  std::vector<protocol::MemberStatus> changes;
  for (const Slot& slot : index_) {
    Member& member = *slot.member;
    protocol::MemberStatus status = StatusOf(member, now_ms);
    if (member.reported == status.state) continue;
    member.reported = status.state;
    changes.push_back(std::move(status));
  }
  return changes;
}

size_t Membership::cluster_size() const {
  size_t size = 0;
  for (const Slot& slot : index_) size += slot.member->record.left ? 0 : 1;
  return size;
}

}  // namespace tally
