#include "node/metrics/metrics.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/front_counters.h"
#include "node/common/version.h"
#include "tests/metrics/sample_node.h"

namespace tally {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

size_t Lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

std::string RenderOf(testing::SampleNode& node) {
  Metrics metrics(node.Sources());
  metrics.AddFront("protocol", &node.protocol);
  metrics.AddFront("grpc", &node.grpc);
  return metrics.Render();
}

// Counts add up over stripes, per domain slot; latencies land in the bucket whose bound they reach.
TEST_CASE("front counters: stripes sum, and each latency falls in its bucket") {
  FrontCounters counters(3, FrontCounters::Writers::kOnePerStripe);
  counters.Count(0, 5, {.allowed = 2, .denied = 1});
  counters.Count(2, 5, {.allowed = 1, .errors = 4, .shadow_denied = 1});
  counters.RecordLatency(0, 5'000);          // exactly the first bound: le="5e-06"
  counters.RecordLatency(1, 5'001);          // just past it: the next bucket
  counters.RecordLatency(2, -7);             // a clock step back counts as 0
  counters.RecordLatency(2, 2'000'000'000);  // past the last bound
  const FrontCounters::Snapshot snapshot = counters.Read();
  CHECK(snapshot.by_domain[5].allowed == 3);
  CHECK(snapshot.by_domain[5].denied == 1);
  CHECK(snapshot.by_domain[5].errors == 4);
  CHECK(snapshot.by_domain[5].shadow_denied == 1);
  CHECK(snapshot.Total().checks() == 8);
  CHECK(snapshot.latency_buckets[0] == 2);
  CHECK(snapshot.latency_buckets[1] == 1);
  CHECK(snapshot.latency_buckets[FrontCounters::kLatencyBuckets - 1] == 1);
  CHECK(snapshot.latency_count == 4);
  CHECK(snapshot.latency_sum_ns == 2'000'010'001);
}

// Writers on many threads sharing stripes lose no count (Writers::kAny), scrapes running meanwhile.
TEST_CASE("front counters: shared stripes lose nothing under concurrent writers and reads") {
  FrontCounters counters(2, FrontCounters::Writers::kAny);
  Metrics metrics({});
  metrics.AddFront("grpc", &counters);
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&counters, t] {
      for (int i = 0; i < 10'000; ++i) {
        counters.Count(static_cast<size_t>(t) % 2, 1, {.allowed = 1});
        counters.RecordLatency(static_cast<size_t>(t) % 2, 1'000);
      }
    });
  }
  for (int i = 0; i < 20; ++i) CHECK_FALSE(metrics.Render().empty());
  for (std::thread& writer : writers) writer.join();
  CHECK(counters.Read().by_domain[1].allowed == 40'000);
  CHECK(counters.Read().latency_count == 40'000);
}

// Render writes each front's checks by domain and outcome, shadow denials and the latency
// histogram.
TEST_CASE("metrics: fronts by domain and outcome, with the latency histogram") {
  testing::SampleNode node;
  const std::string text = RenderOf(node);
  CHECK(HasLine(text, R"(tally_checks_total{domain="",front="protocol",outcome="allowed"} 2)"));
  CHECK(HasLine(text, R"(tally_checks_total{domain="",front="protocol",outcome="denied"} 1)"));
  CHECK(HasLine(text, R"(tally_checks_total{domain="api",front="protocol",outcome="error"} 1)"));
  CHECK(HasLine(text, R"(tally_checks_total{domain="edge",front="grpc",outcome="denied"} 5)"));
  CHECK(HasLine(text, R"(tally_checks_total{domain="_other",front="grpc",outcome="allowed"} 1)"));
  CHECK(HasLine(text, R"(tally_shadow_denied_total{domain="api",front="protocol"} 1)"));
  CHECK(HasLine(text, R"(tally_quota_exceeded_total{domain="edge",front="grpc"} 2)"));
  // A domain a front decided nothing in has no series there.
  CHECK(text.find(R"(domain="edge",front="protocol")") == std::string::npos);
  CHECK(HasLine(text, "# TYPE tally_decision_duration_seconds histogram"));
  CHECK(HasLine(text, R"(tally_decision_duration_seconds_bucket{front="protocol",le="5e-06"} 1)"));
  CHECK(HasLine(text, R"(tally_decision_duration_seconds_bucket{front="protocol",le="1"} 1)"));
  CHECK(HasLine(text, R"(tally_decision_duration_seconds_bucket{front="protocol",le="+Inf"} 2)"));
  CHECK(HasLine(text, R"(tally_decision_duration_seconds_count{front="grpc"} 1)"));
  CHECK(HasLine(text, R"(tally_decision_duration_seconds_sum{front="grpc"} 4e-05)"));
}

// Checks by policy rule: one series per rule name, and "_other" past the cap.
TEST_CASE("metrics: policy rules by name and outcome") {
  testing::SampleNode node;
  const std::string text = RenderOf(node);
  CHECK(HasLine(
      text, R"(tally_rule_checks_total{outcome="allowed",rule="edge.remote_address_10.0.0.1"} 3)"));
  CHECK(HasLine(
      text, R"(tally_rule_checks_total{outcome="denied",rule="edge.remote_address_10.0.0.1"} 1)"));
  CHECK(HasLine(text, R"(tally_rule_checks_total{outcome="error",rule="_other"} 1)"));
  CHECK(HasLine(text, R"(tally_rule_shadow_denied_total{rule="edge.files_files/*"} 1)"));
  CHECK(HasLine(text, R"(tally_rule_quota_exceeded_total{rule="edge.files_files/*"} 1)"));
}

// The node's stats become gauges and counters in base units; links, peers and members get labels.
TEST_CASE("metrics: node stats, links, peers and members") {
  testing::SampleNode node;
  const std::string text = RenderOf(node);
  CHECK(HasLine(text, "tally_ready 1"));
  CHECK(HasLine(text, "tally_keys 1000000"));
  CHECK(HasLine(text, "tally_uptime_seconds 12.5"));
  CHECK(HasLine(text, "tally_storage_disk_bytes 4096"));
  CHECK(HasLine(text, "tally_storage_degraded 1"));
  CHECK(HasLine(text, "tally_gossip_rounds_total 77"));
  CHECK(HasLine(text, R"(tally_gossip_link_up{address="10.0.0.2:7421",node="2"} 1)"));
  CHECK(HasLine(text, R"(tally_gossip_link_lag_seconds{address="10.0.0.2:7421",node="2"} 0.25)"));
  CHECK(
      HasLine(text, R"(tally_gossip_link_up{address="node-3.tally \"quoted\":7421",node="3"} 0)"));
  CHECK(HasLine(text, R"(tally_gossip_peer_last_heard_seconds{node="2"} 0.02)"));
  CHECK(HasLine(text, R"(tally_members{state="alive"} 2)"));
  CHECK(HasLine(text, R"(tally_members{state="dead"} 1)"));
  CHECK(
      HasLine(text, R"(tally_member_state{address="node-3.tally:7421",node="3",state="dead"} 1)"));
  CHECK(HasLine(text, R"(tally_member_heartbeat_lag_seconds{node="2"} 0.003)"));
  // A clock offset only for members heard from directly (not node 3).
  CHECK(HasLine(text, R"(tally_member_clock_offset_seconds{node="2"} -0.042)"));
  CHECK(text.find(R"(tally_member_clock_offset_seconds{node="3"})") == std::string::npos);
  CHECK(HasLine(text, "tally_build_info{version=\"" + std::string(tally::Version()) + "\"} 1"));
}

// Nothing is per key: a node holding a million keys renders as many lines as one holding none.
TEST_CASE("metrics: the output does not grow with the keys held") {
  testing::SampleNode node;
  node.stats.keys = 0;
  const std::string none = RenderOf(node);
  node.stats.keys = 1'000'000;
  const std::string million = RenderOf(node);
  CHECK(Lines(none) == Lines(million));
  CHECK(HasLine(million, "tally_keys 1000000"));
}

// Without a name for a slot (no policy store, or a slot past the named ones), a domain is "_other".
TEST_CASE("metrics: a domain without a name is counted as _other") {
  FrontCounters counters(1, FrontCounters::Writers::kOnePerStripe);
  counters.Count(0, 7, {.denied = 2});
  Metrics metrics({});
  metrics.AddFront("resp", &counters);
  const std::string text = metrics.Render();
  CHECK(HasLine(text, R"(tally_checks_total{domain="_other",front="resp",outcome="denied"} 2)"));
  CHECK(text.find("tally_ready") == std::string::npos);  // no readiness given
  CHECK(text.find("tally_keys") == std::string::npos);   // no stats given
}

}  // namespace
}  // namespace tally
