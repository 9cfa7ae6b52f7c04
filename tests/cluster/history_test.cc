// The history checker (cluster/history.h) on made-up histories: it passes a
// window within the bound and flags, with an excerpt, one that admits too
// much or denies under the limit.
#include "cluster/history.h"

#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace tally::cluster {
namespace {

// `admitted` allowed then `denied` denied decisions of key k in window 7.
std::vector<Observed> Window(uint64_t admitted, uint64_t denied) {
  std::vector<Observed> history;
  for (uint64_t i = 0; i < admitted + denied; ++i) {
    const auto at_ms = static_cast<int64_t>(7'000 + i);
    history.push_back({i % 3, "k", at_ms, at_ms + 1, 7, i < admitted});
  }
  return history;
}

HistoryBound Bound(int64_t staleness_ms, size_t deciders) {
  return HistoryBound{
      .limit = 100, .window_ms = 1'000, .staleness_ms = staleness_ms, .deciders = deciders};
}

// Admitting the limit exactly under 10x demand passes, with ratio 1.
TEST_CASE("history: a window at the limit passes") {
  const HistoryVerdict verdict = CheckFixedWindow(Window(100, 900), Bound(100, 1));
  CHECK(verdict.ok());
  REQUIRE(verdict.windows.size() == 1);
  CHECK(verdict.windows[0].central == 100);
  CHECK(verdict.worst_ratio == doctest::Approx(1.0));
}

// Excess beyond what stale views explain is flagged with the window and an excerpt.
TEST_CASE("history: admitting beyond the bound is a violation") {
  // 1000 requests in a 1000 ms window, views 100 ms stale: 100 may be extra,
  // but a single decider cannot overshoot: (deciders - 1) x limit = 0 caps it.
  HistoryVerdict verdict = CheckFixedWindow(Window(150, 850), Bound(100, 1));
  REQUIRE_FALSE(verdict.ok());
  CHECK(verdict.violations[0].find("window 7") != std::string::npos);
  CHECK(verdict.violations[0].find("node ") != std::string::npos);
  // Two deciders allow up to 100 more.
  verdict = CheckFixedWindow(Window(150, 850), Bound(100, 2));
  CHECK(verdict.ok());
  CHECK(verdict.windows[0].most == 200);
  CHECK(CheckFixedWindow(Window(201, 799), Bound(100, 2)).violations.size() == 1);
}

// A denial while the window is under its limit is a false 429.
TEST_CASE("history: a denial under the limit is a violation") {
  const HistoryVerdict verdict = CheckFixedWindow(Window(60, 10), Bound(100, 1));
  REQUIRE_FALSE(verdict.ok());
  CHECK(verdict.violations[0].find("central") != std::string::npos);
  CHECK(CheckFixedWindow(Window(70, 0), Bound(100, 1)).ok());
}

// Windows with too few requests (the partial edges of a run) are not held to the bound.
TEST_CASE("history: sparse windows are reported, not checked") {
  const HistoryVerdict verdict = CheckFixedWindow(Window(60, 10), Bound(100, 1), 100);
  CHECK(verdict.ok());
  CHECK(verdict.windows.size() == 1);
}

}  // namespace
}  // namespace tally::cluster
