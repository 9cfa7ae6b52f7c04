// Unit tests of PeerCounts (node/engine/peer_counts.h): both windows' peer
// slots in one array, checked against two G-counters as the reference; and
// where a counter key keeps them (node/engine/key_state.h MergeCounts).
#include "node/engine/peer_counts.h"

#include <cstdint>
#include <limits>
#include <random>

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

}  // namespace
}  // namespace tally
