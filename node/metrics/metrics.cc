#include "node/metrics/metrics.h"

#include <mutex>
#include <utility>

#include <prometheus/collectable.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "node/common/version.h"
#include "node/metrics/families.h"

namespace tally {
namespace {

using metrics::Families;

// The label of a FrontCounters domain slot.
std::string DomainLabel(size_t slot, const std::vector<std::string>& names) {
  if (slot == FrontCounters::kNoDomain) return "";
  if (slot < names.size() && !names[slot].empty() && slot != FrontCounters::kOtherDomain) {
    return names[slot];
  }
  return "_other";
}

std::vector<double> LatencyBoundsSeconds() {
  std::vector<double> bounds;
  for (const int64_t ns : FrontCounters::kLatencyBoundsNs) bounds.push_back(ns / 1e9);
  return bounds;
}

}  // namespace

struct Metrics::Impl : prometheus::Collectable {
  explicit Impl(Sources s) : sources(std::move(s)) {
    prometheus::BuildGauge()
        .Name("tally_build_info")
        .Help("Always 1; the labels say which tallyd this is")
        .Register(registry)
        .Add({{"version", std::string(Version())}})
        .Set(1);
  }

  // The families built from tally's own numbers, at scrape time.
  std::vector<prometheus::MetricFamily> Collect() const override {
    Families families;
    if (sources.readiness != nullptr) {
      families.Gauge("tally_ready",
                     "1 once the node listens, has restored its counters and recovered",
                     sources.readiness->ready() ? 1 : 0);
    }
    AddFronts(&families);
    if (sources.rule_series) AddRules(sources.rule_series(), &families);
    if (sources.stats) metrics::AddStatsFamilies(sources.stats(), &families);
    return families.Take();
  }

  void AddFronts(Families* families) const {
    std::vector<std::pair<std::string, FrontCounters::Snapshot>> read;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& [name, counters] : fronts) read.emplace_back(name, counters->Read());
    }
    const std::vector<std::string> names =
        sources.domain_names ? sources.domain_names() : std::vector<std::string>();
    // A front's series for a domain appear once it decided something there;
    // checks without a domain always have theirs.
    const auto shown = [](const FrontCounters::Snapshot& snapshot, size_t slot) {
      const FrontCounters::Outcomes& outcomes = snapshot.by_domain[slot];
      return slot == FrontCounters::kNoDomain || outcomes.checks() > 0;
    };
    families->Counter("tally_checks_total",
                      "Checks decided (a policy check: each limited descriptor), by front, policy "
                      "domain (\"\": the check named its limit) and outcome");
    for (const auto& [front, snapshot] : read) {
      for (size_t slot = 0; slot < FrontCounters::kDomainSlots; ++slot) {
        if (!shown(snapshot, slot)) continue;
        const FrontCounters::Outcomes& outcomes = snapshot.by_domain[slot];
        const std::string domain = DomainLabel(slot, names);
        const std::pair<const char*, uint64_t> by_outcome[] = {
            {"allowed", outcomes.allowed}, {"denied", outcomes.denied}, {"error", outcomes.errors}};
        for (const auto& [outcome, count] : by_outcome) {
          families->Add(static_cast<double>(count),
                        {{"domain", domain}, {"front", front}, {"outcome", outcome}});
        }
      }
    }
    const auto by_domain = [&](const char* name, const char* help,
                               uint64_t FrontCounters::Outcomes::*field) {
      families->Counter(name, help);
      for (const auto& [front, snapshot] : read) {
        for (size_t slot = 0; slot < FrontCounters::kDomainSlots; ++slot) {
          if (!shown(snapshot, slot)) continue;
          families->Add(static_cast<double>(snapshot.by_domain[slot].*field),
                        {{"domain", DomainLabel(slot, names)}, {"front", front}});
        }
      }
    };
    by_domain("tally_shadow_denied_total",
              "Checks a shadow-mode limit would have denied (allowed, and counted in "
              "tally_checks_total as allowed)",
              &FrontCounters::Outcomes::shadow_denied);
    by_domain("tally_quota_exceeded_total",
              "Policy descriptors over a quota-mode limit, allowed because another quota-mode "
              "descriptor of the request was within its own (counted in tally_checks_total as "
              "allowed)",
              &FrontCounters::Outcomes::quota_exceeded);
    families->Histogram("tally_decision_duration_seconds",
                        "Time to decide one request (all its checks or descriptors), by front");
    static const std::vector<double> kBounds = LatencyBoundsSeconds();
    for (const auto& [front, snapshot] : read) {
      families->AddHistogram(
          kBounds,
          std::vector<uint64_t>(snapshot.latency_buckets.begin(), snapshot.latency_buckets.end()),
          static_cast<double>(snapshot.latency_sum_ns) / 1e9, {{"front", front}});
    }
  }

  // Per policy rule, as RuleCounters names them (at most its cap, then "_other").
  static void AddRules(const RuleSeries& series, Families* families) {
    families->Counter("tally_rule_checks_total",
                      "Policy descriptors decided, by rule (envoyproxy/ratelimit's stats name; "
                      "\"_other\" past the cap on series) and outcome");
    for (const auto& [rule, outcomes] : series) {
      const std::pair<const char*, uint64_t> by_outcome[] = {
          {"allowed", outcomes.allowed}, {"denied", outcomes.denied}, {"error", outcomes.errors}};
      for (const auto& [outcome, count] : by_outcome) {
        families->Add(static_cast<double>(count), {{"outcome", outcome}, {"rule", rule}});
      }
    }
    const auto per_rule = [&](const char* name, const char* help,
                              uint64_t FrontCounters::Outcomes::*field) {
      families->Counter(name, help);
      for (const auto& [rule, outcomes] : series) {
        families->Add(static_cast<double>(outcomes.*field), {{"rule", rule}});
      }
    };
    per_rule("tally_rule_shadow_denied_total",
             "Descriptors a shadow-mode rule would have denied, by rule",
             &FrontCounters::Outcomes::shadow_denied);
    per_rule("tally_rule_quota_exceeded_total",
             "Descriptors over a quota-mode rule's limit but allowed, by rule",
             &FrontCounters::Outcomes::quota_exceeded);
  }

  const Sources sources;
  prometheus::Registry registry;  // what does not change between scrapes
  mutable std::mutex mu;          // guards fronts
  std::vector<std::pair<std::string, const FrontCounters*>> fronts;
};

Metrics::Metrics(Sources sources) : impl_(std::make_unique<Impl>(std::move(sources))) {}

Metrics::~Metrics() = default;

void Metrics::AddFront(const std::string& name, const FrontCounters* counters) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fronts.emplace_back(name, counters);
}

std::string Metrics::Render() const {
  std::vector<prometheus::MetricFamily> families = impl_->registry.Collect();
  std::vector<prometheus::MetricFamily> own = impl_->Collect();
  families.insert(families.end(), std::make_move_iterator(own.begin()),
                  std::make_move_iterator(own.end()));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace tally
