#include "node/engine/counter_peers.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace tally {

CounterPeers& CounterPeers::operator=(CounterPeers&& other) noexcept {
  if (this != &other) {
    Reset();
    slot_ = std::exchange(other.slot_, PeerCounts::Slot{});
  }
  return *this;
}

RemoteCounts& CounterPeers::MakeFull() {
  if (RemoteCounts* remote = full()) return *remote;
  auto remote = std::make_unique<RemoteCounts>();
  if (slot_.node != 0) remote->peers.TakeFirst(slot_);
  SetRemote(remote.release());
  return *Remote();
}

void CounterPeers::Shrink() {
  const RemoteCounts* remote = full();
  if (remote == nullptr || remote->peers.size() > 1 || remote->peers_unsaved || remote->epoch ||
      remote->denied || remote->own_unsent != kUnsentUnknown || remote->own_sent != 0 ||
      remote->sent_at_ms != 0 || remote->turn_at_ms != 0) {
    return;
  }
  const PeerCounts::Slot slot =
      remote->peers.empty() ? PeerCounts::Slot{} : remote->peers.slots()[0];
  delete remote;
  slot_ = slot;
}

void CounterPeers::Adopt(std::unique_ptr<RemoteCounts> remote) {
  Reset();
  SetRemote(remote.release());
}

void CounterPeers::Reset() {
  delete full();
  slot_ = {};
}

void CounterPeers::Merge(const GCounter& from, NodeId except, size_t room,
                         uint32_t PeerCounts::Slot::*window) {
  if (RemoteCounts* remote = full()) {
    if (window == &PeerCounts::Slot::current) {
      remote->peers.MergeCurrent(from, except, room);
    } else {
      remote->peers.MergePrevious(from, except, room);
    }
    return;
  }
  for (const GCounter::Slot& theirs : from.slots()) {
    if (theirs.node == except || theirs.node == 0 || theirs.count == 0) continue;
    if (slot_.node != 0 && slot_.node != theirs.node) {
      // A second peer: every slot goes to the heap (max-merges: `from` again
      // changes nothing it already gave).
      MakeFull();
      Merge(from, except, room, window);
      return;
    }
    slot_.node = theirs.node;  // from empty: the pointer's bytes were zero counts
    const auto count = static_cast<uint32_t>(
        std::min<uint64_t>(theirs.count, std::numeric_limits<uint32_t>::max()));
    slot_.*window = std::max(slot_.*window, count);
  }
}

void CounterPeers::Roll() {
  if (RemoteCounts* remote = full()) {
    remote->peers.Roll();
    return;
  }
  if (slot_.node == 0) return;
  slot_ = slot_.current > 0 ? PeerCounts::Slot{slot_.node, 0, slot_.current} : PeerCounts::Slot{};
}

void CounterPeers::ExportTo(WindowCounts* counts) const {
  if (const RemoteCounts* remote = full()) {
    remote->peers.ExportTo(counts);
  } else if (slot_.node != 0) {
    counts->current.MergeSlot(slot_.node, slot_.current);
    counts->previous.MergeSlot(slot_.node, slot_.previous);
  }
}

}  // namespace tally
