// The replicated token bucket (node/common/bucket_slices.h) against brute force: merge laws on
// random states, and randomized clusters of engines whose every decision must lie between two
// central buckets fed the history that engine has heard of: one charging each cost at its true
// time (the engine is never more permissive) and one charging it at the end of its slice
// (s = max(1, W / 32); the engine is never less). The reference shares no code with the engine.

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/bucket_slices.h"
#include "node/common/clock.h"
#include "node/common/key_snapshot.h"
#include "node/common/limit.h"
#include "node/engine/limiter.h"

namespace tally {
namespace {

__extension__ typedef unsigned __int128 Uint128;

struct Event {
  NodeId node;
  int64_t at_ms;
  uint64_t cost;
};

uint64_t Uniform(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

// A central bucket fed `events` (in time order): its debt at t_ms in token-ms, each cost
// charged at its slice's end (or, with at_slice_end false, at its true time), refilling `limit`
// token-ms per ms from then on: the most, over charge times p, that the cost charged from p on
// exceeds the refill since p.
uint64_t CentralDebt(const std::vector<Event>& events, uint64_t limit, uint64_t window_ms,
                     int64_t t_ms, bool at_slice_end) {
  const auto slice_ms =
      at_slice_end ? static_cast<int64_t>(std::max<uint64_t>(1, window_ms / 32)) : 1;
  Uint128 debt = 0;
  Uint128 cost = 0;  // charged from events[i]'s charge time on
  for (size_t i = events.size(); i-- > 0;) {
    cost += events[i].cost;
    if (i > 0 && events[i - 1].at_ms / slice_ms == events[i].at_ms / slice_ms) continue;
    const int64_t p_ms =
        at_slice_end ? (events[i].at_ms / slice_ms + 1) * slice_ms : events[i].at_ms;
    const Uint128 refill = t_ms > p_ms ? static_cast<Uint128>(t_ms - p_ms) * limit : 0;
    if (cost * window_ms > refill) debt = std::max(debt, cost * window_ms - refill);
  }
  return static_cast<uint64_t>(debt);
}

// The smallest wait (bisected: with nothing admitted the debt never rises) after which
// `holds` is true; it must hold after 64 windows.
template <typename Predicate>
uint64_t FirstWaitMs(uint64_t window_ms, const Predicate& holds) {
  uint64_t lo = 0;
  uint64_t hi = 64 * window_ms + 64;
  REQUIRE(holds(hi));
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (holds(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The central bucket's decision at now_ms (costs charged as CentralDebt says).
Decision CentralDecide(const std::vector<Event>& events, const LimitSpec& spec, int64_t now_ms,
                       uint64_t cost, bool at_slice_end) {
  const uint64_t full = spec.limit * spec.window_ms;
  const auto debt_at = [&](const std::vector<Event>& history, uint64_t wait_ms) {
    return CentralDebt(history, spec.limit, spec.window_ms, now_ms + static_cast<int64_t>(wait_ms),
                       at_slice_end);
  };
  const auto passes = [&](uint64_t wait_ms, uint64_t c) {
    return debt_at(events, wait_ms) + c * spec.window_ms <= full;
  };
  Decision d;
  d.limit = spec.limit;
  const uint64_t probe = std::max<uint64_t>(cost, 1);
  const uint64_t debt = debt_at(events, 0);
  const uint64_t available = debt >= full ? 0 : (full - debt) / spec.window_ms;
  std::vector<Event> after = events;
  if (probe > spec.limit) {
    d.never_allowed = true;
    d.remaining = available;
  } else if (passes(0, probe)) {
    d.allowed = true;
    d.remaining = available - cost;
    if (cost > 0) after.push_back({0, now_ms, cost});
  } else {
    d.remaining = available;
    d.retry_after_ms =
        FirstWaitMs(spec.window_ms, [&](uint64_t wait_ms) { return passes(wait_ms, probe); });
  }
  d.reset_after_ms =
      FirstWaitMs(spec.window_ms, [&](uint64_t wait_ms) { return debt_at(after, wait_ms) == 0; });
  return d;
}

// The state of `events` (all in slices from base_slice on) as a node holds it.
BucketSlices StateOf(const std::vector<Event>& events, uint64_t capacity, uint64_t window_ms,
                     int64_t base_slice) {
  BucketSlices state;
  state.capacity = capacity;
  state.base_slice = base_slice;
  for (const Event& e : events) {
    AddToBucket(state, e.node, BucketSliceAt(window_ms, e.at_ms), e.cost);
  }
  return state;
}

// A random subset of a history that is a prefix of each node's events (what a replica may
// have heard: a node's slot only grows).
std::vector<Event> HeardOf(std::mt19937_64& rng, const std::vector<Event>& history) {
  std::vector<Event> heard;
  std::vector<int64_t> heard_until(8, 0);
  for (NodeId node = 1; node < 8; ++node) {
    heard_until[node] = history.empty() ? 0 : static_cast<int64_t>(Uniform(rng, 0, 2'000));
  }
  for (const Event& e : history) {
    if (e.at_ms - history.front().at_ms < heard_until[e.node]) heard.push_back(e);
  }
  return heard;
}

// Merges of states with one base are a join: idempotent, commutative, associative, and
// equal to the state of the union of what each had heard; a fold changes no decision.
TEST_CASE("bucket merge laws on random replicas of one history") {
  std::mt19937_64 rng(20'261'204);
  for (int round = 0; round < 300; ++round) {
    CAPTURE(round);
    const uint64_t window_ms = Uniform(rng, 1, 4) == 1 ? Uniform(rng, 1, 40) : 3'200;
    const uint64_t limit = Uniform(rng, 1, 50);
    const int64_t start_ms = static_cast<int64_t>(Uniform(rng, 0, 1'000'000));
    const int64_t base_slice = BucketBaseFor(BucketSliceAt(window_ms, start_ms));
    // 30 admissions within the two periods a state keeps.
    const auto slice_ms = static_cast<int64_t>(BucketSliceMs(window_ms));
    std::vector<int64_t> times;
    for (int i = 0; i < 30; ++i) {
      times.push_back(
          base_slice * slice_ms +
          static_cast<int64_t>(Uniform(rng, 0, 2 * kBucketSlicesPerPeriod * slice_ms - 1)));
    }
    std::sort(times.begin(), times.end());
    std::vector<Event> history;
    for (int64_t at_ms : times) {
      history.push_back({static_cast<NodeId>(Uniform(rng, 1, 4)), at_ms, Uniform(rng, 1, 5)});
    }
    const int64_t t_ms = times.back();
    const auto state = [&](const std::vector<Event>& heard) {
      return StateOf(heard, limit, window_ms, base_slice);
    };
    const BucketSlices a = state(HeardOf(rng, history));
    const BucketSlices b = state(HeardOf(rng, history));
    const BucketSlices c = state(HeardOf(rng, history));
    const auto merged = [&](BucketSlices x, const BucketSlices& y) {
      MergeBucket(x, y, window_ms);
      return x;
    };
    CHECK(merged(a, a) == a);
    CHECK(merged(a, b) == merged(b, a));
    CHECK(merged(merged(a, b), c) == merged(a, merged(b, c)));
    CHECK(merged(merged(a, b), b) == merged(a, b));  // a duplicated delivery
    // With every replica heard, the merge is the state of the whole history.
    CHECK(merged(merged(a, state(history)), b) == state(history));
    // The debt is the central bucket's, before and after a fold that keeps the current
    // period, at any later time.
    const BucketSlices whole = state(history);
    BucketSlices folded = whole;
    const int64_t now_slice = BucketSliceAt(window_ms, t_ms);
    FoldBucket(folded, window_ms, BucketBaseFor(now_slice));
    for (int64_t later_ms : {t_ms, t_ms + 1, t_ms + static_cast<int64_t>(window_ms) / 3}) {
      CAPTURE(later_ms);
      const uint64_t central = CentralDebt(history, limit, window_ms, later_ms, true);
      CHECK(BucketDebt(whole, limit, window_ms, later_ms) == central);
      if (later_ms >= t_ms) CHECK(BucketDebt(folded, limit, window_ms, later_ms) == central);
    }
    // BucketFullBy (the expiry test's shortcut) answers as BucketFullAtMs does, around the
    // time it gives and before it.
    const BucketSlices empty{limit, base_slice, 0, {}};
    const BucketSlices* const states[] = {&a, &whole, &folded, &empty};
    for (const BucketSlices* x : states) {
      const int64_t full_ms = BucketFullAtMs(*x, window_ms);
      for (int64_t now_ms : {int64_t{0}, t_ms, full_ms - 1, full_ms, full_ms + 1}) {
        CAPTURE(now_ms);
        CHECK(BucketFullBy(*x, window_ms, now_ms) == (full_ms <= now_ms));
      }
    }
  }
}

// A replica heard of late, after the receiver folded its base, never counts anything twice:
// the merged debt lies between each side's and the union's.
TEST_CASE("bucket merge after a fold never double-counts") {
  std::mt19937_64 rng(7);
  const uint64_t window_ms = 3'200;  // 100 ms slices, 800 ms periods
  const uint64_t limit = 40;
  for (int round = 0; round < 200; ++round) {
    std::vector<Event> history;
    int64_t t_ms = 1'000'000'000 - 1'000'000'000 % 800;
    const int64_t base_slice = BucketBaseFor(BucketSliceAt(window_ms, t_ms));
    for (int i = 0; i < 20; ++i) {
      t_ms += static_cast<int64_t>(Uniform(rng, 0, 60));
      history.push_back({static_cast<NodeId>(Uniform(rng, 1, 3)), t_ms, Uniform(rng, 1, 4)});
    }
    const std::vector<Event> heard_a = HeardOf(rng, history);
    const std::vector<Event> heard_b = HeardOf(rng, history);
    BucketSlices a = StateOf(heard_a, limit, window_ms, base_slice);
    const BucketSlices b = StateOf(heard_b, limit, window_ms, base_slice);
    const int64_t later_ms = t_ms + 1'700;  // two periods on: a has folded
    FoldBucket(a, window_ms, BucketBaseFor(BucketSliceAt(window_ms, later_ms)));
    MergeBucket(a, b, window_ms);
    const uint64_t merged = BucketDebt(a, limit, window_ms, later_ms);
    CHECK(merged >= CentralDebt(heard_a, limit, window_ms, later_ms, true));
    CHECK(merged >= CentralDebt(heard_b, limit, window_ms, later_ms, true));
    CHECK(merged <= CentralDebt(history, limit, window_ms, later_ms, true));
  }
}

// What a decision found available: its remaining, plus the cost it admitted.
uint64_t Available(const Decision& d, uint64_t cost) {
  return d.remaining + (d.allowed ? cost : 0);
}

// `d` lies between the central bucket charging at true times (`loose`) and the one charging at
// slice ends (`tight`): never admits what the first denies, never denies what the second admits.
void CheckBetween(const Decision& d, const Decision& loose, const Decision& tight, uint64_t cost) {
  CHECK(Available(d, cost) <= Available(loose, cost));
  CHECK(Available(d, cost) >= Available(tight, cost));
  CHECK((!d.allowed || loose.allowed));
  CHECK((!tight.allowed || d.allowed));
  CHECK(d.never_allowed == tight.never_allowed);
  if (!d.allowed && !d.never_allowed) {
    CHECK(d.retry_after_ms >= loose.retry_after_ms);
    CHECK(d.retry_after_ms <= tight.retry_after_ms);
  }
}

// Three to five engines gossip a bucket key with random delays, duplicates and reorderings
// (everything heard by all before a period ends, the fold's assumption). Every decision, by
// any engine, lies between two central buckets fed exactly the admissions that engine has
// heard of, one charging each cost at its true time and one at its slice's end.
TEST_CASE("replicated bucket decisions lie between central buckets fed the same merged history") {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const size_t nodes = Uniform(rng, 3, 5);
    const LimitSpec spec{Algorithm::kTokenBucket, Uniform(rng, 1, 30),
                         Uniform(rng, 0, 2) == 0 ? Uniform(rng, 1, 64) : 3'200};
    ManualClock clock(static_cast<int64_t>(Uniform(rng, 1, 1'000'000'000)));
    std::vector<std::unique_ptr<Limiter>> engines;
    for (size_t i = 0; i < nodes; ++i) {
      Limiter::Options options;
      options.node_id = static_cast<NodeId>(i + 1);
      options.clock = &clock;
      options.replicate = true;
      engines.push_back(std::make_unique<Limiter>(options));
    }
    std::vector<Event> history;                  // every admission, ids by position
    std::vector<std::set<size_t>> heard(nodes);  // what each engine has heard of
    struct Pending {
      size_t to;
      KeySnapshot snapshot;
      std::set<size_t> carries;
    };
    std::vector<Pending> pending;
    const auto send = [&](size_t from, size_t to) {
      Pending p{to, {}, heard[from]};
      if (engines[from]->Read("k", spec, &p.snapshot).ok()) pending.push_back(std::move(p));
    };
    const auto deliver = [&](size_t i) {
      REQUIRE(engines[pending[i].to]->Merge(pending[i].snapshot).ok());
      heard[pending[i].to].insert(pending[i].carries.begin(), pending[i].carries.end());
    };
    const auto everyone_hears_everything = [&] {
      for (size_t i = 0; i < pending.size(); ++i) deliver(i);
      pending.clear();
      for (size_t from = 0; from < nodes; ++from) {
        for (size_t to = 0; to < nodes; ++to) {
          if (to != from) send(from, to);
        }
      }
      for (size_t i = 0; i < pending.size(); ++i) deliver(i);
      pending.clear();
    };
    const int64_t period_ms =
        static_cast<int64_t>(BucketSliceMs(spec.window_ms)) * kBucketSlicesPerPeriod;
    for (int step = 0; step < 250; ++step) {
      CAPTURE(step);
      const int64_t advance_ms = static_cast<int64_t>(
          Uniform(rng, 0, 5) == 0 ? Uniform(rng, 0, 2 * spec.window_ms)
                                  : Uniform(rng, 0, std::max<uint64_t>(spec.window_ms / 16, 2)));
      if ((clock.WallMs() + advance_ms) / period_ms != clock.WallMs() / period_ms) {
        everyone_hears_everything();
      }
      clock.AdvanceMs(advance_ms);
      const size_t at = Uniform(rng, 0, nodes - 1);
      const uint64_t cost = Uniform(rng, 0, 9) == 0 ? 0 : Uniform(rng, 1, spec.limit + 1);
      std::vector<Event> known;
      for (size_t id : heard[at]) known.push_back(history[id]);
      std::sort(known.begin(), known.end(),
                [](const Event& a, const Event& b) { return a.at_ms < b.at_ms; });
      const Decision loose = CentralDecide(known, spec, clock.WallMs(), cost, false);
      const Decision tight = CentralDecide(known, spec, clock.WallMs(), cost, true);
      Decision decision;
      REQUIRE(engines[at]->Check("k", spec, cost, &decision).ok());
      CheckBetween(decision, loose, tight, cost);
      if (decision.allowed && cost > 0) {
        heard[at].insert(history.size());
        history.push_back({static_cast<NodeId>(at + 1), clock.WallMs(), cost});
      }
      // Gossip: a few snapshots sent; some delivered now, some twice, in any order.
      for (uint64_t n = Uniform(rng, 0, 2); n > 0; --n) {
        const size_t from = Uniform(rng, 0, nodes - 1);
        send(from, (from + Uniform(rng, 1, nodes - 1)) % nodes);
      }
      std::shuffle(pending.begin(), pending.end(), rng);
      while (!pending.empty() && Uniform(rng, 0, 2) == 0) {
        deliver(pending.size() - 1);
        if (Uniform(rng, 0, 3) != 0) pending.pop_back();  // else delivered again later
      }
    }
    // Everyone having heard everything, all decide within the two central buckets fed all of it.
    everyone_hears_everything();
    for (size_t at = 0; at < nodes; ++at) {
      Decision decision;
      REQUIRE(engines[at]->Check("k", spec, 0, &decision).ok());
      CheckBetween(decision, CentralDecide(history, spec, clock.WallMs(), 0, false),
                   CentralDecide(history, spec, clock.WallMs(), 0, true), 0);
    }
  }
}

}  // namespace
}  // namespace tally
