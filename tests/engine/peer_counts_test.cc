// Unit tests of PeerCounts (node/engine/peer_counts.h): both windows' peer
// slots in one array, checked against two G-counters as the reference; of
// CounterPeers (node/engine/counter_peers.h): one peer's slot inside the
// entry, more on the heap, read alike; and where a counter key keeps them
// (node/engine/key_state.h MergeCounts).
#include "node/engine/peer_counts.h"

#include <cstdint>
#include <limits>
#include <random>
#include <utility>

#include <doctest/doctest.h>

#include "node/common/limit.h"
#include "node/engine/key_state.h"

namespace tally {
namespace {

constexpr NodeId kSelf = 3;

GCounter Counter(std::initializer_list<GCounter::Slot> slots) {
  GCounter counter;
  for (const GCounter::Slot& slot : slots) counter.MergeSlot(slot.node, slot.count);
  return counter;
}

// What the peers' counts export, as G-counters.
WindowCounts Exported(const PeerCounts& peers) {
  WindowCounts counts;
  peers.ExportTo(&counts);
  return counts;
}

// A merge takes each slot's max in its window, leaves out the own node's
// slot, and keeps the sums; merging again changes nothing.
TEST_CASE("peer counts merge slot-wise max per window, without the own slot") {
  PeerCounts peers;
  peers.MergeCurrent(Counter({{1, 5}, {kSelf, 9}, {7, 2}}), kSelf);
  peers.MergePrevious(Counter({{2, 4}, {7, 6}}), kSelf);
  peers.MergeCurrent(Counter({{1, 3}, {7, 8}}), kSelf);  // 1 lower: kept at 5
  peers.MergeCurrent(Counter({{1, 3}, {7, 8}}), kSelf);  // again: idempotent
  CHECK(peers.current_sum() == 13);
  CHECK(peers.previous_sum() == 10);
  const WindowCounts counts = Exported(peers);
  CHECK(counts.current == Counter({{1, 5}, {7, 8}}));
  CHECK(counts.previous == Counter({{2, 4}, {7, 6}}));
}

// Rolling makes the current window the previous one and drops the slots that
// counted nothing in it.
TEST_CASE("peer counts roll into the previous window") {
  PeerCounts peers;
  peers.MergeCurrent(Counter({{1, 5}}), kSelf);
  peers.MergePrevious(Counter({{2, 4}}), kSelf);
  peers.Roll();
  CHECK(peers.current_sum() == 0);
  CHECK(peers.previous_sum() == 5);
  CHECK(Exported(peers).previous == Counter({{1, 5}}));
  CHECK(Exported(peers).current.empty());
  peers.Roll();
  CHECK(peers.empty());
  CHECK(peers.previous_sum() == 0);
}

// A faulty peer's count beyond 32 bits saturates, and still exceeds every limit.
TEST_CASE("peer counts saturate at 32 bits") {
  PeerCounts peers;
  peers.MergeCurrent(Counter({{1, uint64_t{1} << 40}, {2, 7}}), kSelf);
  CHECK(peers.current_sum() == uint64_t{std::numeric_limits<uint32_t>::max()} + 7);
  CHECK(peers.current_sum() > kMaxLimit);
}

// Random merges in both windows, rolls and all, beyond the inline slots:
// the same slots and sums as two G-counters merged alike.
TEST_CASE("peer counts match two G-counters on random merges") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    PeerCounts peers;
    GCounter current, previous;
    const NodeId nodes = 1 + rng() % 12;  // beyond PeerCounts::kInlinePeers
    for (int step = 0; step < 30; ++step) {
      GCounter delta;
      for (NodeId node = 1; node <= nodes; ++node) {
        if (rng() % 3 == 0) delta.MergeSlot(node, rng() % 50);
      }
      switch (rng() % 5) {
        case 0:
          peers.Roll();
          previous = current;
          current.Clear();
          break;
        case 1:
          peers.MergePrevious(delta, kSelf);
          previous.Merge(delta, kSelf);
          break;
        default: peers.MergeCurrent(delta, kSelf); current.Merge(delta, kSelf);
      }
      const WindowCounts counts = Exported(peers);
      REQUIRE(counts.current == current);
      REQUIRE(counts.previous == previous);
      REQUIRE(peers.current_sum() == current.Sum());
      REQUIRE(peers.previous_sum() == previous.Sum());
    }
  }
}

constexpr size_t kRoom = 63;  // peers of a cluster of 64

// What a CounterPeers exports, as G-counters.
WindowCounts Exported(const CounterPeers& peers) {
  WindowCounts counts;
  peers.ExportTo(&counts);
  return counts;
}

// The slots as a span reads them equal what ExportTo gives, and the sums.
void CheckReadsAlike(const CounterPeers& peers, const GCounter& current, const GCounter& previous) {
  const WindowCounts counts = Exported(peers);
  REQUIRE(counts.current == current);
  REQUIRE(counts.previous == previous);
  REQUIRE(peers.current_sum() == current.Sum());
  REQUIRE(peers.previous_sum() == previous.Sum());
  WindowCounts from_slots;
  for (const PeerCounts::Slot& slot : peers.slots()) {
    REQUIRE((slot.current > 0 || slot.previous > 0));
    from_slots.current.MergeSlot(slot.node, slot.current);
    from_slots.previous.MergeSlot(slot.node, slot.previous);
  }
  REQUIRE(from_slots.current == current);
  REQUIRE(from_slots.previous == previous);
}

// Whether the peers' slots live inside the PeerCounts object (no allocation of their own).
bool Inline(const PeerCounts& peers) {
  const auto* object = reinterpret_cast<const char*>(&peers);
  const auto* slots = reinterpret_cast<const char*>(peers.slots().data());
  return slots >= object && slots < object + sizeof(PeerCounts);
}

// One peer's slot stays inside the object, whatever it merges from that
// peer; a second peer moves both slots to a RemoteCounts.
TEST_CASE("counter peers keep one peer's slot inline and move to the heap at a second") {
  CounterPeers peers;
  CHECK(peers.empty());
  peers.MergeCurrent(Counter({{1, 4}, {kSelf, 9}}), kSelf, kRoom);
  peers.MergePrevious(Counter({{1, 2}}), kSelf, kRoom);
  peers.MergeCurrent(Counter({{1, 3}}), kSelf, kRoom);  // lower: kept at 4
  CHECK_FALSE(peers.empty());
  CHECK(peers.full() == nullptr);
  CHECK(peers.slots().size() == 1);
  CheckReadsAlike(peers, Counter({{1, 4}}), Counter({{1, 2}}));
  peers.MergeCurrent(Counter({{1, 5}, {2, 1}}), kSelf, kRoom);
  REQUIRE(peers.full() != nullptr);
  CHECK(Inline(peers.full()->peers));
  CheckReadsAlike(peers, Counter({{1, 5}, {2, 1}}), Counter({{1, 2}}));
}

// MakeFull moves the inline slot into the RemoteCounts; a move hands the
// RemoteCounts over; Reset leaves nothing.
TEST_CASE("counter peers move their slot to a RemoteCounts on demand, and move whole") {
  CounterPeers peers;
  peers.MergeCurrent(Counter({{7, 6}}), kSelf, kRoom);
  RemoteCounts& remote = peers.MakeFull();
  CHECK(&remote == peers.full());
  CHECK(&peers.MakeFull() == &remote);  // made once
  remote.own_unsent = 11;
  CheckReadsAlike(peers, Counter({{7, 6}}), GCounter());
  CounterPeers moved = std::move(peers);
  CHECK(peers.empty());
  CHECK(moved.full() == &remote);
  CHECK(moved.full()->own_unsent == 11);
  moved.Reset();
  CHECK(moved.empty());
  CHECK(moved.current_sum() == 0);
  CHECK(moved.slots().empty());
}

// A RemoteCounts that keeps only a peer's slot (after a flag, stored)
// shrinks back inside; one that keeps more of this node's state stays.
TEST_CASE("counter peers shrink back inline only when the heap form keeps a slot alone") {
  CounterPeers peers;
  peers.MergeCurrent(Counter({{2, 3}}), kSelf, kRoom);
  peers.MakeFull().peers_unsaved = true;
  peers.Shrink();
  REQUIRE(peers.full() != nullptr);  // the flag is kept there
  peers.full()->peers_unsaved = false;
  peers.Shrink();
  CHECK(peers.full() == nullptr);
  CheckReadsAlike(peers, Counter({{2, 3}}), GCounter());
  peers.MakeFull().own_unsent = 1;
  peers.Shrink();
  CHECK(peers.full() != nullptr);
  peers.Reset();
  peers.MakeFull();
  peers.Shrink();
  CHECK(peers.empty());
}

// Rolling an inline slot keeps it only while its current window counted.
TEST_CASE("counter peers roll an inline slot, and drop it once it counts nothing") {
  CounterPeers peers;
  peers.MergeCurrent(Counter({{1, 5}}), kSelf, kRoom);
  peers.Roll();
  CheckReadsAlike(peers, GCounter(), Counter({{1, 5}}));
  peers.Roll();
  CHECK(peers.empty());
}

// A slot of node 0, which no node has, is never kept: 0 marks the heap form.
TEST_CASE("counter peers ignore a slot of node 0") {
  CounterPeers peers;
  peers.MergeCurrent(Counter({{0, 9}}), kSelf, kRoom);
  CHECK(peers.empty());
  peers.MergeCurrent(Counter({{0, 9}, {4, 1}}), kSelf, kRoom);
  CHECK(peers.full() == nullptr);
  CheckReadsAlike(peers, Counter({{4, 1}}), GCounter());
}

// Random merges in both windows and rolls among up to four peers, through
// the inline form, the heap form and back to empty: the same slots and sums
// as two G-counters merged alike.
TEST_CASE("counter peers match two G-counters on random merges") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    CounterPeers peers;
    GCounter current, previous;
    const NodeId nodes = 1 + rng() % 4;
    for (int step = 0; step < 30; ++step) {
      const uint64_t op = rng() % 6;
      if (op == 0) {
        peers.Roll();
        previous = std::exchange(current, GCounter());
      } else if (op == 1) {
        if (rng() % 4 == 0) peers.MakeFull();
      } else {
        GCounter delta;  // some peers' counts, one window
        for (NodeId node = 1; node <= nodes; ++node) {
          if (rng() % 3 == 0) delta.MergeSlot(node, rng() % 50);
        }
        const bool into_previous = op == 2;
        if (into_previous) {
          peers.MergePrevious(delta, kSelf, kRoom);
        } else {
          peers.MergeCurrent(delta, kSelf, kRoom);
        }
        (into_previous ? previous : current).Merge(delta, kSelf);
      }
      CheckReadsAlike(peers, current, previous);
    }
  }
}

// In a large cluster a key that one peer admits on allocates nothing; two
// keep their slots inside the RemoteCounts; a third makes room for every
// peer at once.
TEST_CASE("a counter key heard from one peer of many allocates nothing, from two no slots") {
  CounterEntry entry;
  WindowCounts counts;
  counts.window_index = 0;
  counts.current = Counter({{1, 4}});
  MergeCounts(entry, kSelf, kRoom, counts);
  CHECK(entry.peers.full() == nullptr);
  CHECK(CurrentTotal(entry) == 4);
  counts.current = Counter({{1, 4}, {2, 1}});
  MergeCounts(entry, kSelf, kRoom, counts);
  REQUIRE(entry.peers.full() != nullptr);
  CHECK(entry.peers.full()->peers.size() == 2);
  CHECK(Inline(entry.peers.full()->peers));
  counts.current = Counter({{5, 2}});
  MergeCounts(entry, kSelf, kRoom, counts);
  CHECK(entry.peers.full()->peers.size() == 3);
  CHECK_FALSE(Inline(entry.peers.full()->peers));
  CHECK(CurrentTotal(entry) == 7);
}

}  // namespace
}  // namespace tally
