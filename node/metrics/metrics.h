// Metrics: the node's state in Prometheus' text exposition format (what
// /metrics on the admin port answers). README "Metrics" lists every family.
//
// Nothing is collected ahead of a scrape: Render reads the fronts'
// FrontCounters (node/common/front_counters.h), the node's stats
// (protocol::StatsReply: keys, connections, storage, policies, gossip, its
// links, peers and members) and the readiness, builds prometheus-cpp
// MetricFamily values from them, and serialises them with prometheus-cpp's
// TextSerializer. So the hot path pays only for its own counters, and a
// scrape costs the same whatever the number of keys: no family has a series
// per key. Series per policy domain are bounded by FrontCounters'
// kDomainSlots, per policy rule by RuleCounters' cap, per peer by the
// cluster's size.
//
// Thread safety: AddFront and Render from any thread (a mutex guards the
// list of fronts); the sources are called on Render's thread and must be
// thread-safe themselves.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "node/common/front_counters.h"
#include "node/common/readiness.h"
#include "protocol/messages.h"

namespace tally {

// Checks by policy rule: (rule name, outcomes) per series (node/policy's
// RuleCounters::Read).
using RuleSeries = std::vector<std::pair<std::string, FrontCounters::Outcomes>>;

class Metrics {
 public:
  struct Sources {
    // The node's stats; empty: none of the families that come from them.
    std::function<protocol::StatsReply()> stats;
    // The policy domain of each FrontCounters slot (PolicyStore::
    // DomainSlotNames); empty, or "" for a slot: counted as "_other".
    std::function<std::vector<std::string>()> domain_names;
    // Checks by policy rule; empty: no tally_rule_* families.
    std::function<RuleSeries()> rule_series;
    const Readiness* readiness = nullptr;  // not owned; null: no tally_ready
  };

  explicit Metrics(Sources sources);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Exports `counters` with the label front="<name>" (e.g. "protocol",
  // "grpc", "http", "resp"). counters must outlive the Metrics.
  void AddFront(const std::string& name, const FrontCounters* counters);

  // Every family, in Prometheus' text format (version 0.0.4).
  std::string Render() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally
