#include "node/policy/rule_counters.h"

#include <spdlog/spdlog.h>

namespace tally {

struct alignas(64) RuleCounters::Cell {
  std::atomic<uint64_t> allowed{0};
  std::atomic<uint64_t> denied{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> shadow_denied{0};
  std::atomic<uint64_t> quota_exceeded{0};

  FrontCounters::Outcomes Load() const {
    const auto get = [](const std::atomic<uint64_t>& value) {
      return value.load(std::memory_order_relaxed);
    };
    return FrontCounters::Outcomes{get(allowed), get(denied), get(errors), get(shadow_denied),
                                   get(quota_exceeded)};
  }
};

RuleCounters::RuleCounters(size_t max_series)
    : max_series_(max_series), cells_(std::make_unique<Cell[]>(max_series + 1)) {}

RuleCounters::~RuleCounters() = default;

uint32_t RuleCounters::Slot(std::string_view name) {
  const auto other = static_cast<uint32_t>(max_series_);
  Shard& shard = shards_[NameHash()(name) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  if (const auto found = shard.slots.find(name); found != shard.slots.end()) {
    return found->second;
  }
  if (full_.load(std::memory_order_relaxed)) return other;
  std::lock_guard<std::mutex> names_lock(names_mu_);
  if (names_.size() == max_series_) {
    if (!full_.exchange(true)) {
      spdlog::warn(
          "policy metrics: {} rule series reached; rules beyond them are counted under rule=\"{}\" "
          "(detailed_metric and value_to_metric make a series per value)",
          max_series_, kOtherName);
    }
    return other;
  }
  const auto slot = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  shard.slots.emplace(name, slot);
  return slot;
}

void RuleCounters::Count(uint32_t slot, Outcome outcome) {
  Cell& cell = cells_[slot];
  const auto add = [](std::atomic<uint64_t>& value) {
    value.fetch_add(1, std::memory_order_relaxed);
  };
  switch (outcome) {
    case Outcome::kAllowed: add(cell.allowed); return;
    case Outcome::kDenied: add(cell.denied); return;
    case Outcome::kError: add(cell.errors); return;
    case Outcome::kShadowDenied:
      add(cell.allowed);
      add(cell.shadow_denied);
      return;
    case Outcome::kQuotaExceeded:
      add(cell.allowed);
      add(cell.quota_exceeded);
      return;
  }
}

std::vector<std::pair<std::string, FrontCounters::Outcomes>> RuleCounters::Read() const {
  std::vector<std::pair<std::string, FrontCounters::Outcomes>> series;
  {
    std::lock_guard<std::mutex> lock(names_mu_);
    series.reserve(names_.size() + 1);
    for (size_t slot = 0; slot < names_.size(); ++slot) {
      series.emplace_back(names_[slot], cells_[slot].Load());
    }
  }
  const FrontCounters::Outcomes other = cells_[max_series_].Load();
  if (other.checks() > 0) series.emplace_back(kOtherName, other);
  return series;
}

}  // namespace tally
