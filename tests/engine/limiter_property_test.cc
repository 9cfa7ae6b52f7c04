// Randomized property tests of tally::Limiter against a brute-force reference model.
//
// Each scenario has its own fixed seed (printed on failure, so it replays exactly), a
// ManualClock that only moves forward (standing still, small steps, exact window starts,
// whole-window jumps) and one Limiter holding 1-5 limits on 3 keys, requests interleaved.
// The model follows the semantics in node/common/limit.h in exact integer "scaled" units
// (cost * window_ms) and shares no code with the engine.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/common/limit.h"
#include "node/engine/limiter.h"

namespace doctest {
template <>
struct StringMaker<tally::Decision> {
  static String convert(const tally::Decision& d) {
    std::ostringstream out;
    out << "{allowed=" << d.allowed << " never_allowed=" << d.never_allowed << " limit=" << d.limit
        << " remaining=" << d.remaining << " reset_after_ms=" << d.reset_after_ms
        << " retry_after_ms=" << d.retry_after_ms << "}";
    return out.str().c_str();
  }
};
}  // namespace doctest

namespace {

using tally::Algorithm;
using tally::Decision;
using tally::LimitSpec;
__extension__ typedef unsigned __int128 Uint128;  // exact bounds at kMaxLimit * kMaxWindowMs

constexpr uint64_t kBaseSeed = 20'240'601;

int64_t After(int64_t now_ms, uint64_t wait_ms) { return now_ms + static_cast<int64_t>(wait_ms); }

// The smallest wait in [lo_ms, hi_ms] at which `passes` holds, by bisection: `passes` must be
// monotone (true stays true for longer waits) and hold at hi_ms.
template <typename Predicate>
uint64_t BisectWaitMs(uint64_t lo_ms, uint64_t hi_ms, const Predicate& passes) {
  while (lo_ms < hi_ms) {
    const uint64_t mid_ms = lo_ms + (hi_ms - lo_ms) / 2;
    if (passes(mid_ms)) {
      hi_ms = mid_ms;
    } else {
      lo_ms = mid_ms + 1;
    }
  }
  return lo_ms;
}

// The same, trying every millisecond: the brute force that checks the bisection.
template <typename Predicate>
uint64_t ScanWaitMs(uint64_t lo_ms, uint64_t hi_ms, const Predicate& passes) {
  while (lo_ms < hi_ms && !passes(lo_ms)) ++lo_ms;
  return lo_ms;
}

// What one limit (key, algorithm, window_ms) has consumed. Its load at time t is in scaled
// units: a request of cost c passes at t iff load(t) + c * W <= limit * W. With nothing
// arriving, load never rises as time passes (for all four algorithms), so waits bisect.
class ReferenceLimit {
 public:
  ReferenceLimit(Algorithm algorithm, uint64_t window_ms)
      : algorithm_(algorithm), window_ms_(window_ms) {}

  // t_ms must not precede the latest admitted request.
  uint64_t LoadScaled(int64_t t_ms, uint64_t limit) const {
    const uint64_t w = window_ms_;
    const int64_t window = t_ms / static_cast<int64_t>(w);
    switch (algorithm_) {
      case Algorithm::kFixedWindow: return CountIn(window) * w;
      case Algorithm::kSlidingWindowCounter:  // cur * W + prev * (W - elapsed_ms)
        return CountIn(window) * w + CountIn(window - 1) * (w - static_cast<uint64_t>(t_ms) % w);
      case Algorithm::kSlidingWindowLog: {  // entries in (t - W, t]
        uint64_t sum = 0;
        for (const auto& [at_ms, cost] : log_) {
          if (at_ms > t_ms - static_cast<int64_t>(w)) sum += cost;
        }
        return sum * w;
      }
      case Algorithm::kTokenBucket: {  // capacity - level; each ms refills `limit` units
        const uint64_t refill = std::min(static_cast<uint64_t>(t_ms - refilled_at_ms_), w) * limit;
        return bucket_deficit_ > refill ? bucket_deficit_ - refill : 0;
      }
    }
    return 0;
  }

  bool Passes(int64_t t_ms, uint64_t cost, uint64_t limit) const {  // requires cost <= limit
    return LoadScaled(t_ms, limit) + cost * window_ms_ <= limit * window_ms_;
  }

  // The decision the semantics prescribe for a request at now_ms; applies it.
  Decision Decide(int64_t now_ms, uint64_t cost, uint64_t limit) {
    const uint64_t probe = std::max<uint64_t>(cost, 1);  // a peek asks about cost 1
    const uint64_t horizon_ms = 2 * window_ms_;          // all consumption is gone by then
    Decision d;
    d.limit = limit;
    if (probe > limit) {
      d.never_allowed = true;
    } else if (Passes(now_ms, probe, limit)) {
      d.allowed = true;
      if (cost > 0) Consume(now_ms, cost, limit);
    } else {
      d.retry_after_ms = BisectWaitMs(1, horizon_ms, [&](uint64_t wait_ms) {
        return Passes(After(now_ms, wait_ms), probe, limit);
      });
    }
    const uint64_t capacity = limit * window_ms_;
    const uint64_t load = LoadScaled(now_ms, limit);
    d.remaining = load >= capacity ? 0 : (capacity - load) / window_ms_;
    // The full limit is available <=> a request of cost `limit` passes <=> load is 0.
    d.reset_after_ms = BisectWaitMs(0, horizon_ms, [&](uint64_t wait_ms) {
      return Passes(After(now_ms, wait_ms), limit, limit);
    });
    return d;
  }

 private:
  void Consume(int64_t t_ms, uint64_t cost, uint64_t limit) {
    const int64_t window = t_ms / static_cast<int64_t>(window_ms_);
    switch (algorithm_) {
      case Algorithm::kFixedWindow:
      case Algorithm::kSlidingWindowCounter:
        count_by_window_[window] += cost;
        count_by_window_.erase(count_by_window_.begin(), count_by_window_.lower_bound(window - 1));
        break;
      case Algorithm::kSlidingWindowLog:
        std::erase_if(log_, [&](const auto& entry) {
          return entry.first <= t_ms - static_cast<int64_t>(window_ms_);
        });
        log_.emplace_back(t_ms, cost);
        break;
      case Algorithm::kTokenBucket:
        bucket_deficit_ = LoadScaled(t_ms, limit) + cost * window_ms_;
        refilled_at_ms_ = t_ms;
        break;
    }
  }

  uint64_t CountIn(int64_t window) const {
    const auto it = count_by_window_.find(window);
    return it == count_by_window_.end() ? 0 : it->second;
  }

  Algorithm algorithm_;
  uint64_t window_ms_;
  std::map<int64_t, uint64_t> count_by_window_;    // counters: window index -> cost
  std::vector<std::pair<int64_t, uint64_t>> log_;  // sliding log: (at_ms, cost)
  uint64_t bucket_deficit_ = 0;                    // token bucket, scaled; starts full
  int64_t refilled_at_ms_ = 0;
};

struct Request {
  int64_t at_ms;
  uint64_t cost;
  uint64_t limit;
  Decision decision;  // the engine's
};

// One limit the driver exercises: its identity, its model and every request sent to it.
struct TrackedLimit {
  std::string key;
  LimitSpec spec;  // spec.limit is the usual limit; with vary_limit a request may use another
  ReferenceLimit reference;
  std::vector<Request> history;
};

struct DriverConfig {
  std::vector<Algorithm> algorithms;
  uint64_t max_limit = 20;
  uint64_t max_window_ms = 50;
  bool vary_limit = false;  // requests may bring other limit values (never for the bucket)
  uint64_t scenarios = 400;
  uint64_t max_steps = 300;
};

// Small sizes keep brute force cheap; huge ones reach kMaxLimit and kMaxWindowMs.
DriverConfig Config(std::vector<Algorithm> algorithms, bool huge, bool vary_limit) {
  if (!huge) return {std::move(algorithms), 20, 50, vary_limit, 400, 300};
  return {std::move(algorithms), tally::kMaxLimit, tally::kMaxWindowMs, vary_limit, 150, 200};
}

uint64_t Uniform(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

// A limit or a window_ms in [lo, hi], favouring the edges and small values.
uint64_t RandomSize(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  switch (Uniform(rng, 0, 9)) {
    case 0: return lo;
    case 1: return lo + 1;
    case 2: return hi;
    case 3:
    case 4:
    case 5: return Uniform(rng, lo, std::min<uint64_t>(hi, 20));
    case 6: return Uniform(rng, lo, std::min<uint64_t>(hi, 100'000));
    default: return Uniform(rng, lo, hi);
  }
}

uint64_t RandomCost(std::mt19937_64& rng, uint64_t limit) {
  switch (Uniform(rng, 0, 19)) {
    case 0:
    case 1:
    case 2: return 0;  // peek
    case 3: return limit;
    case 4: return limit + 1;  // never allowed
    case 5: return std::numeric_limits<uint64_t>::max();
    case 6:
    case 7:
    case 8:
    case 9: return Uniform(rng, 1, std::max<uint64_t>(limit, 1));
    default: return Uniform(rng, 1, 3);
  }
}

uint64_t RandomAdvanceMs(std::mt19937_64& rng, uint64_t window_ms, int64_t now_ms) {
  switch (Uniform(rng, 0, 9)) {
    case 0:
    case 1: return 0;                                                      // stand still
    case 2: return window_ms - static_cast<uint64_t>(now_ms) % window_ms;  // next window start
    case 3: return window_ms * Uniform(rng, 1, 3);                         // whole windows
    case 4: return Uniform(rng, 0, 2 * window_ms);
    default: return Uniform(rng, 0, std::max<uint64_t>(window_ms / 8, 3));
  }
}

int64_t RandomStartMs(std::mt19937_64& rng, uint64_t window_ms) {
  switch (Uniform(rng, 0, 3)) {
    case 0: return 0;
    case 1: return static_cast<int64_t>(window_ms * Uniform(rng, 1, 1000));  // a window start
    default: return 1'700'000'000'000 + static_cast<int64_t>(Uniform(rng, 0, 10'000'000));
  }
}

std::string Describe(const TrackedLimit& tracked) {
  std::ostringstream out;
  out << tally::AlgorithmName(tracked.spec.algorithm) << " key=" << tracked.key
      << " limit=" << tracked.spec.limit << " window_ms=" << tracked.spec.window_ms
      << "\nrequests (at_ms cost limit -> engine decision):";
  for (const Request& r : tracked.history) {
    out << "\n  " << r.at_ms << " " << r.cost << " " << r.limit << " -> "
        << doctest::StringMaker<Decision>::convert(r.decision);
  }
  return out.str();
}

Decision WithoutReset(Decision d) {
  d.reset_after_ms = 0;
  return d;
}

// Runs after each request once the engine matched the model (reset_after_ms aside: it has its
// own test); tracked.history ends with the request and tracked.reference has applied it.
using StepCheck = std::function<void(const TrackedLimit& tracked, const Decision& expected)>;
// Runs on every limit after its scenario: "" or a description of a violation.
using LimitCheck = std::function<std::string(const TrackedLimit& tracked)>;

std::vector<TrackedLimit> RunScenario(uint64_t seed, const DriverConfig& config,
                                      const StepCheck& step_check) {
  std::mt19937_64 rng(seed);
  std::vector<TrackedLimit> limits;
  const uint64_t limit_count = Uniform(rng, 1, 5);  // on 3 keys, sharded by hash
  for (uint64_t i = 0; i < limit_count; ++i) {
    LimitSpec spec{.algorithm = config.algorithms[Uniform(rng, 0, config.algorithms.size() - 1)],
                   .limit = RandomSize(rng, 0, config.max_limit),
                   .window_ms = RandomSize(rng, 1, config.max_window_ms)};
    // Limits i and i - 3 share a key, so (algorithm, window_ms) must tell them apart.
    if (i >= 3 && spec.algorithm == limits[i - 3].spec.algorithm &&
        spec.window_ms == limits[i - 3].spec.window_ms) {
      spec.window_ms = spec.window_ms % config.max_window_ms + 1;
    }
    spec.limit = std::min(spec.limit, tally::MaxLimitFor(spec.window_ms));  // a year's is less
    limits.push_back({"user-" + std::to_string(i % 3),
                      spec,
                      ReferenceLimit(spec.algorithm, spec.window_ms),
                      {}});
  }
  tally::ManualClock clock(RandomStartMs(rng, limits[0].spec.window_ms));
  tally::Limiter limiter(tally::Limiter::Options{.node_id = 1, .max_keys = 100, .clock = &clock});
  const uint64_t steps = Uniform(rng, 1, config.max_steps);
  for (uint64_t step = 0; step < steps; ++step) {
    TrackedLimit& tracked = limits[Uniform(rng, 0, limits.size() - 1)];
    LimitSpec spec = tracked.spec;
    clock.AdvanceMs(static_cast<int64_t>(RandomAdvanceMs(rng, spec.window_ms, clock.WallMs())));
    if (config.vary_limit && spec.algorithm != Algorithm::kTokenBucket && Uniform(rng, 0, 3) == 0) {
      spec.limit =
          RandomSize(rng, 0, std::min(config.max_limit, tally::MaxLimitFor(spec.window_ms)));
    }
    const uint64_t cost = RandomCost(rng, spec.limit);
    Decision engine;
    const tally::Status status = limiter.Check(tracked.key, spec, cost, &engine);
    const int64_t now_ms = clock.WallMs();
    tracked.history.push_back({now_ms, cost, spec.limit, engine});
    const Decision expected = tracked.reference.Decide(now_ms, cost, spec.limit);
    INFO("step ", step, ": ", Describe(tracked));
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    REQUIRE(WithoutReset(engine) == WithoutReset(expected));
    if (step_check) step_check(tracked, expected);
  }
  return limits;
}

void RunScenarios(const DriverConfig& config, const StepCheck& step_check,
                  const LimitCheck& limit_check = {}) {
  for (uint64_t seed = kBaseSeed; seed < kBaseSeed + config.scenarios; ++seed) {
    CAPTURE(seed);
    for (const TrackedLimit& tracked : RunScenario(seed, config, step_check)) {
      if (limit_check) CHECK(limit_check(tracked) == "");
    }
  }
}

// Replays every request of `tracked` on a fresh Limiter and clock (the engine must decide
// the same again), waits wait_ms, then sends `cost` under the last request's limit.
Decision ReplayThenCheck(const TrackedLimit& tracked, uint64_t wait_ms, uint64_t cost) {
  tally::ManualClock clock(tracked.history.front().at_ms);
  tally::Limiter limiter(tally::Limiter::Options{.node_id = 1, .max_keys = 10, .clock = &clock});
  LimitSpec spec = tracked.spec;
  Decision decision;
  for (const Request& request : tracked.history) {
    clock.AdvanceMs(request.at_ms - clock.WallMs());
    spec.limit = request.limit;
    REQUIRE(limiter.Check(tracked.key, spec, request.cost, &decision).ok());
    REQUIRE(decision == request.decision);
  }
  clock.AdvanceMs(static_cast<int64_t>(wait_ms));
  REQUIRE(limiter.Check(tracked.key, spec, cost, &decision).ok());
  return decision;
}

std::vector<Request> Admitted(const TrackedLimit& tracked) {
  std::vector<Request> admitted;
  std::copy_if(tracked.history.begin(), tracked.history.end(), std::back_inserter(admitted),
               [](const Request& r) { return r.decision.allowed && r.cost > 0; });
  return admitted;
}

// Brute force: the first trailing window (t - W, t] admitting more than the limit, for t
// every admission time (where the sum peaks).
std::string FirstOverfullLogWindow(const TrackedLimit& tracked) {
  const std::vector<Request> admitted = Admitted(tracked);
  const int64_t window_ms = static_cast<int64_t>(tracked.spec.window_ms);
  for (const Request& end : admitted) {
    uint64_t sum = 0;
    for (const Request& r : admitted) {
      if (r.at_ms > end.at_ms - window_ms && r.at_ms <= end.at_ms) sum += r.cost;
    }
    if (sum > tracked.spec.limit) {
      return "admitted " + std::to_string(sum) + " by " + std::to_string(end.at_ms) + "\n" +
             Describe(tracked);
    }
  }
  return "";
}

// Brute force: the first admission times t1 <= t2 whose admitted cost in [t1, t2] exceeds
// capacity + rate * (t2 - t1), multiplied out: cost * W > L * W + L * (t2 - t1).
std::string FirstBucketOverdraft(const TrackedLimit& tracked) {
  const std::vector<Request> admitted = Admitted(tracked);
  const Uint128 window_ms = tracked.spec.window_ms;
  const Uint128 limit = tracked.spec.limit;
  for (size_t first = 0; first < admitted.size(); ++first) {
    Uint128 sum = 0;
    for (size_t last = first; last < admitted.size(); ++last) {
      sum += admitted[last].cost;
      const Uint128 span_ms = static_cast<uint64_t>(admitted[last].at_ms - admitted[first].at_ms);
      if (sum * window_ms > limit * window_ms + limit * span_ms) {
        return "admitted " + std::to_string(static_cast<uint64_t>(sum)) + " in [" +
               std::to_string(admitted[first].at_ms) + ", " + std::to_string(admitted[last].at_ms) +
               "]\n" + Describe(tracked);
      }
    }
  }
  return "";
}

const std::vector<Algorithm> kAllAlgorithms = {
    Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog, Algorithm::kSlidingWindowCounter,
    Algorithm::kTokenBucket};

}  // namespace

// Fixed window and sliding-window counter decide exactly as the model, up to kMax* sizes.
TEST_CASE("property: fixed window and sliding counter match the reference model") {
  const std::vector<Algorithm> counters = {Algorithm::kFixedWindow,
                                           Algorithm::kSlidingWindowCounter};
  for (const bool huge : {false, true}) RunScenarios(Config(counters, huge, true), {});
}

// Sliding log decides as the model, and no trailing window ever admits more than the limit.
TEST_CASE("property: sliding log matches the reference model and never overfills a window") {
  const std::vector<Algorithm> log = {Algorithm::kSlidingWindowLog};
  for (const bool huge : {false, true}) {
    RunScenarios(Config(log, huge, false), {}, FirstOverfullLogWindow);
  }
}

// Token bucket decides as the model, and never admits more than capacity + rate * elapsed.
TEST_CASE("property: token bucket matches the reference model and never exceeds its refill") {
  const std::vector<Algorithm> bucket = {Algorithm::kTokenBucket};
  for (const bool huge : {false, true}) {
    RunScenarios(Config(bucket, huge, false), {}, FirstBucketOverdraft);
  }
}

// retry_after_ms is the first ms (brute force) a denial passes; a replayed engine agrees.
TEST_CASE("property: retry_after_ms is the exact smallest wait that lets the request pass") {
  uint64_t denials = 0;
  const auto check = [&](const TrackedLimit& tracked, const Decision& expected) {
    if (expected.allowed || expected.never_allowed) return;
    const Request& last = tracked.history.back();
    const uint64_t probe = std::max<uint64_t>(last.cost, 1);
    const auto passes_after = [&](uint64_t wait_ms) {
      return tracked.reference.Passes(After(last.at_ms, wait_ms), probe, last.limit);
    };
    const uint64_t retry_after_ms = ScanWaitMs(1, 3 * tracked.spec.window_ms, passes_after);
    REQUIRE(last.decision.retry_after_ms == retry_after_ms);
    if (++denials % 8 != 0) return;  // replays are slow: a sample suffices
    CHECK_FALSE(ReplayThenCheck(tracked, retry_after_ms - 1, last.cost).allowed);
    CHECK(ReplayThenCheck(tracked, retry_after_ms, last.cost).allowed);
  };
  RunScenarios(Config(kAllAlgorithms, false, true), check);
}

// reset_after_ms is the first ms (brute force) the full limit passes; a replay agrees.
TEST_CASE("property: reset_after_ms is the exact wait until the full limit is available") {
  uint64_t resets = 0;
  const auto check = [&](const TrackedLimit& tracked, const Decision& expected) {
    const Request& last = tracked.history.back();
    const auto full_limit_passes_after = [&](uint64_t wait_ms) {
      return tracked.reference.Passes(After(last.at_ms, wait_ms), last.limit, last.limit);
    };
    const uint64_t reset_after_ms =
        ScanWaitMs(0, 3 * tracked.spec.window_ms, full_limit_passes_after);
    REQUIRE(expected.reset_after_ms == reset_after_ms);
    REQUIRE(last.decision.reset_after_ms == reset_after_ms);
    if (reset_after_ms == 0 || last.limit == 0 || ++resets % 8 != 0) return;
    CHECK(ReplayThenCheck(tracked, reset_after_ms - 1, 0).remaining < last.limit);
    CHECK(ReplayThenCheck(tracked, reset_after_ms, 0).remaining == last.limit);
  };
  RunScenarios(Config(kAllAlgorithms, false, true), check);
}
