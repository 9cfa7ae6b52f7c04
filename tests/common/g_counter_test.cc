// Unit tests of the G-counter CRDT (node/common/g_counter.h).
#include "node/common/g_counter.h"

#include <random>

#include <doctest/doctest.h>

namespace tally {
namespace {

GCounter RandomCounter(std::mt19937_64& rng) {
  GCounter counter;
  const int slots = static_cast<int>(rng() % 5);
  for (int i = 0; i < slots; ++i) counter.MergeSlot(1 + rng() % 6, rng() % 100);
  return counter;
}

GCounter Merged(GCounter a, const GCounter& b) {
  a.Merge(b);
  return a;
}

// Each node counts in its own slot and the total is the sum of the slots.
TEST_CASE("g-counter sums per-node slots") {
  GCounter counter;
  counter.Increment(1, 3);
  counter.Increment(2, 4);
  counter.Increment(1, 2);
  CHECK(counter.Get(1) == 5);
  CHECK(counter.Get(2) == 4);
  CHECK(counter.Get(3) == 0);
  CHECK(counter.Sum() == 9);
}

// Merge is a slot-wise max: idempotent, commutative, associative, never lowers.
TEST_CASE("g-counter merge is a join") {
  std::mt19937_64 rng(20261202);
  for (int round = 0; round < 2'000; ++round) {
    const GCounter a = RandomCounter(rng);
    const GCounter b = RandomCounter(rng);
    const GCounter c = RandomCounter(rng);
    CHECK(Merged(a, a) == a);
    CHECK(Merged(a, b) == Merged(b, a));
    CHECK(Merged(Merged(a, b), c) == Merged(a, Merged(b, c)));
    const GCounter ab = Merged(a, b);
    CHECK(ab.Sum() >= a.Sum());
    CHECK(ab.Sum() >= b.Sum());
    for (const GCounter::Slot& slot : a.slots()) CHECK(ab.Get(slot.node) >= slot.count);
    // Replaying an old state after newer ones changes nothing.
    CHECK(Merged(ab, a) == ab);
  }
}

// Merge in one pass gives what merging slot by slot gives, the excepted
// node's slot left as it was, and the sum to match.
TEST_CASE("g-counter merge of a whole counter matches merging slot by slot") {
  std::mt19937_64 rng(20261205);
  for (int round = 0; round < 2'000; ++round) {
    const GCounter a = RandomCounter(rng);
    const GCounter b = RandomCounter(rng);
    const NodeId except = round % 3 == 0 ? 0 : 1 + rng() % 8;
    GCounter by_slot = a;
    for (const GCounter::Slot& slot : b.slots()) {
      if (slot.node != except) by_slot.MergeSlot(slot.node, slot.count);
    }
    GCounter at_once = a;
    at_once.Merge(b, except);
    CHECK(at_once == by_slot);
    CHECK(at_once.Sum() == by_slot.Sum());
    CHECK(at_once.Get(except) == a.Get(except));
  }
}

// Slots merged one at a time, in node order (as a decoder meets them) or in any order, keep
// the slots sorted and the sum what a recount of them gives, saturated.
TEST_CASE("g-counter slot merges keep the slots sorted and the sum exact") {
  std::mt19937_64 rng(20261206);
  for (int round = 0; round < 2'000; ++round) {
    const bool in_order = round % 2 == 0;
    const bool huge = round % 3 == 0;  // near saturation
    GCounter counter;
    for (NodeId i = 1; i <= 8; ++i) {
      const NodeId node = in_order ? i : 1 + rng() % 6;
      counter.MergeSlot(node, huge ? UINT64_MAX / 3 + rng() % 1'000 : rng() % 100);
    }
    uint64_t recount = 0;
    for (size_t i = 0; i < counter.slots().size(); ++i) {
      const GCounter::Slot& slot = counter.slots()[i];
      CHECK(slot.count > 0);
      if (i > 0) CHECK(counter.slots()[i - 1].node < slot.node);
      recount = recount > UINT64_MAX - slot.count ? UINT64_MAX : recount + slot.count;
    }
    CHECK(counter.Sum() == recount);
  }
}

// A sum that would overflow saturates instead of wrapping to a small number.
TEST_CASE("g-counter sum saturates") {
  GCounter counter;
  counter.MergeSlot(1, UINT64_MAX - 1);
  counter.MergeSlot(2, 5);
  CHECK(counter.Sum() == UINT64_MAX);
}

}  // namespace
}  // namespace tally
