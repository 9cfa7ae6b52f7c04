// RuleCounters: descriptors decided by policy, counted by rule, for metrics
// (tally_rule_checks_total and its kin, node/metrics/metrics.h). A rule is
// counted under its metric name (RuleMetricName in node/policy/policy.h:
// envoyproxy/ratelimit's stats name, which detailed_metric and
// value_to_metric extend with the request's values).
//
// Cardinality is capped: names get a series as they first come, up to
// max_series; every later name is counted under "_other", and the first
// time that happens it is logged once. A name keeps its series until the
// process ends, across policy reloads, so that counters never go back.
//
// Cost: Count is relaxed fetch_adds on the series' own cache line. Slot
// takes one of kShards mutexes (by the name's hash) for a map lookup;
// PolicySet caches the slot of each rule whose name never varies, so only
// names that carry request values are looked up per check.
//
// Thread safety: every method from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "node/common/front_counters.h"

namespace tally {

class RuleCounters {
 public:
  static constexpr uint32_t kUnassigned = UINT32_MAX;
  static constexpr size_t kDefaultMaxSeries = 1'000;
  static constexpr char kOtherName[] = "_other";

  // A descriptor's outcome. Shadow denials and quota excesses are allowed,
  // and counted as such as well (FrontCounters::Outcomes' convention).
  enum class Outcome { kAllowed, kDenied, kError, kShadowDenied, kQuotaExceeded };

  explicit RuleCounters(size_t max_series = kDefaultMaxSeries);
  ~RuleCounters();
  RuleCounters(const RuleCounters&) = delete;
  RuleCounters& operator=(const RuleCounters&) = delete;

  // The slot that counts `name`: its own, or the "_other" slot once
  // max_series names have one.
  uint32_t Slot(std::string_view name);
  void Count(uint32_t slot, Outcome outcome);

  // Every named series in the order the names came, then "_other" if
  // anything was counted there.
  std::vector<std::pair<std::string, FrontCounters::Outcomes>> Read() const;

 private:
  static constexpr size_t kShards = 16;
  struct Cell;
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>()(name); }
  };
  struct Shard {
    std::mutex mu;
    // Named series only.
    std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> slots;
  };

  const size_t max_series_;
  std::unique_ptr<Cell[]> cells_;  // max_series_ named, then "_other"
  std::array<Shard, kShards> shards_;
  mutable std::mutex names_mu_;     // guards names_
  std::vector<std::string> names_;  // by slot; grows to max_series_
  std::atomic<bool> full_{false};   // names_ holds max_series_ (and it was logged)
};

}  // namespace tally
