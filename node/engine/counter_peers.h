// What a counting key (fixed window, sliding-window counter) holds beyond
// this node's own slots: its peers' slots, and what coordination keeps on it.
//
// In a cluster most keys a node holds are keys it only hears of, from the one
// node that admits on them. CounterPeers keeps such a key's one peer slot
// inline, in 16 bytes inside the entry, with no allocation: the memory a key
// costs a node that only hears of it is most of what taking in peers'
// deltas costs (new memory is touched, and zeroed by the kernel, per key).
// A key that more peers report, or that this node admits on in a cluster,
// holds a RemoteCounts on the heap instead, the inline slot moved into it.
//
// Thread safety: plain structs and a value type; the owning shard's mutex
// guards them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "node/common/g_counter.h"
#include "node/common/node_id.h"
#include "node/engine/escrow.h"
#include "node/engine/peer_counts.h"

namespace tally {

// What an entry's own_unsent holds when it is not known (RemoteCounts made by
// a merge while some of this node's admissions waited to be sent).
inline constexpr uint32_t kUnsentUnknown = UINT32_MAX;

// What the nodes denied on a counting key (cost asked for that their views
// had no room for),
// by which shares of what remains weigh each node's demand
// (node/engine/coordination.h): each node's denials in the current and the
// previous window as last heard (this node's: as it sent them the time
// before last, surely arrived by now), this node's as it sent them last, and
// this node's own now. Allocated on the first denial or report of one.
struct DeniedCounts {
  GCounter current;
  GCounter previous;
  uint32_t sent_current = 0;
  uint32_t sent_previous = 0;
  uint32_t own_current = 0;  // saturating
  uint32_t own_previous = 0;
};

// Other nodes' slots of a counting key, with what coordination keeps on it:
// allocated once a second peer reports, or once this node admits on it in a
// cluster (what it sent and when), or, with escrow (node/engine/escrow.h),
// once the key is checked: its epoch lives here; or once a denial is counted.
struct RemoteCounts {
  // First, and next to the flag below: what a merge reads and writes.
  PeerCounts peers;
  // Peers' slots changed by a merge and not written to disk since, while
  // this node's own did not change (node/engine/shard.h: peers_changed).
  bool peers_unsaved = false;
  std::unique_ptr<EscrowEpoch> epoch;  // with escrow only, from the key's first check
  // What this node admitted on the key and has not sent to its peers yet,
  // meaningful only while the entry is marked as having something to send
  // (node/engine/shard.h); kUnsentUnknown: as much as its own slots.
  uint32_t own_unsent = kUnsentUnknown;
  // What it sent last, and when (the wall clock's ms, low 32 bits): on its
  // way to the peers for a while (node/engine/coordination.h).
  uint32_t own_sent = 0;
  uint32_t sent_at_ms = 0;
  // When this node last took a turn (coordination.h: a request passed
  // beyond its share; on a rationed bucket, within it too).
  uint32_t turn_at_ms = 0;
  std::unique_ptr<DeniedCounts> denied;
};

// Empty, one peer's slot inline, or a RemoteCounts (full()). Peers' slots
// read the same whichever it holds. It moves to a RemoteCounts by itself
// when a second peer reports (Merge*); callers that keep more than slots
// ask for one with MakeFull.
class CounterPeers {
 public:
  CounterPeers() = default;
  ~CounterPeers() { Reset(); }
  CounterPeers(const CounterPeers&) = delete;
  CounterPeers& operator=(const CounterPeers&) = delete;
  CounterPeers(CounterPeers&& other) noexcept : slot_(other.slot_) { other.slot_ = {}; }
  CounterPeers& operator=(CounterPeers&& other) noexcept;

  // Neither a peer's slot nor a RemoteCounts.
  bool empty() const { return slot_.node == 0 && Remote() == nullptr; }
  // The RemoteCounts, if it holds one (the peers' slots are then its peers).
  const RemoteCounts* full() const { return slot_.node == 0 ? Remote() : nullptr; }
  RemoteCounts* full() { return slot_.node == 0 ? Remote() : nullptr; }
  // The RemoteCounts, made now if need be, with the inline slot moved into it.
  RemoteCounts& MakeFull();
  // Moves a RemoteCounts that keeps nothing but one peer's slot at most
  // back inside (with persistence, a key a node only hears of holds one
  // while its peers' slots wait to be stored).
  void Shrink();
  // Takes `remote` as its RemoteCounts; it must hold nothing.
  void Adopt(std::unique_ptr<RemoteCounts> remote);
  // Holds nothing any more.
  void Reset();

  uint64_t current_sum() const {
    if (slot_.node != 0) return slot_.current;
    const RemoteCounts* remote = Remote();
    return remote ? remote->peers.current_sum() : 0;
  }
  uint64_t previous_sum() const {
    if (slot_.node != 0) return slot_.previous;
    const RemoteCounts* remote = Remote();
    return remote ? remote->peers.previous_sum() : 0;
  }
  // Sorted by node, as PeerCounts::slots.
  std::span<const PeerCounts::Slot> slots() const {
    if (slot_.node != 0) return {&slot_, 1};
    const RemoteCounts* remote = Remote();
    return remote ? remote->peers.slots() : std::span<const PeerCounts::Slot>();
  }

  // As PeerCounts::MergeCurrent (MergePrevious): slot-wise max with every
  // slot of `from` but except's; `room` is made for that many peers once
  // more than PeerCounts::kInlinePeers report. Slots of node 0 (never a
  // node's id) are ignored.
  void MergeCurrent(const GCounter& from, NodeId except, size_t room) {
    Merge(from, except, room, &PeerCounts::Slot::current);
  }
  void MergePrevious(const GCounter& from, NodeId except, size_t room) {
    Merge(from, except, room, &PeerCounts::Slot::previous);
  }
  // The current window becomes the previous one (PeerCounts::Roll); an
  // inline slot left with no count goes. A RemoteCounts stays.
  void Roll();
  // Adds every peer's slot to the windows of *counts (GCounter::MergeSlot).
  void ExportTo(WindowCounts* counts) const;

 private:
  void Merge(const GCounter& from, NodeId except, size_t room, uint32_t PeerCounts::Slot::*window);
  // Node 0: the bytes of the two counts hold a RemoteCounts pointer (null:
  // empty), read and written as the slot's object representation.
  static constexpr size_t kCountsAt = offsetof(PeerCounts::Slot, current);
  RemoteCounts* Remote() const {
    RemoteCounts* remote;
    std::memcpy(&remote, reinterpret_cast<const unsigned char*>(&slot_) + kCountsAt,
                sizeof(remote));
    return remote;
  }
  void SetRemote(RemoteCounts* remote) {
    slot_.node = 0;
    std::memcpy(reinterpret_cast<unsigned char*>(&slot_) + kCountsAt, &remote, sizeof(remote));
  }

  // The inline slot when its node is not 0; otherwise see Remote().
  PeerCounts::Slot slot_;
};
static_assert(sizeof(CounterPeers) == 16, "inside every counting key's entry: keep it small");
static_assert(offsetof(PeerCounts::Slot, previous) == offsetof(PeerCounts::Slot, current) + 4 &&
                  sizeof(PeerCounts::Slot) == offsetof(PeerCounts::Slot, current) + 8 &&
                  sizeof(RemoteCounts*) == 8,
              "a RemoteCounts pointer fills the two counts");

}  // namespace tally
