// Internal to node/metrics: building prometheus-cpp MetricFamily values
// from tally's own numbers at scrape time.
//
// Thread safety: a Families belongs to the Render call that builds it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "protocol/messages.h"

namespace tally::metrics {

using Labels = std::vector<prometheus::ClientMetric::Label>;

class Families {
 public:
  // Starts a family; the samples added next belong to it. Families that end
  // without samples are left out of Take().
  void Counter(const std::string& name, const std::string& help);
  void Gauge(const std::string& name, const std::string& help);
  void Histogram(const std::string& name, const std::string& help);
  // A counter when `name` ends in _total (Prometheus' rule), else a gauge.
  void Named(const std::string& name, const std::string& help);

  // A sample of the current counter or gauge family.
  void Add(double value, Labels labels = {});
  // A sample of the current histogram family: per-bucket (not cumulative)
  // counts for `bounds`, then one more for everything above them.
  void AddHistogram(const std::vector<double>& bounds, const std::vector<uint64_t>& counts,
                    double sum, Labels labels);

  // A gauge family with one sample.
  void Gauge(const std::string& name, const std::string& help, double value);

  std::vector<prometheus::MetricFamily> Take();

 private:
  void Start(const std::string& name, const std::string& help, prometheus::MetricType type);

  std::vector<prometheus::MetricFamily> families_;
};

// The families of a node's stats: uptime, keys, connections, storage,
// policies, the gRPC front's calls, gossip, links, peers and members.
void AddStatsFamilies(const protocol::StatsReply& stats, Families* families);

}  // namespace tally::metrics
