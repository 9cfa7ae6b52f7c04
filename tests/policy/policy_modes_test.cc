// What envoyproxy/ratelimit's descriptor keys mean once loaded: quota_mode
// (soft limits), metadata (read with YAML's types, merged as
// envoyproxy/ratelimit merges it), detailed_metric and value_to_metric
// (metric names, counted by rule under a cap).
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/policy/policy.h"
#include "node/policy/policy_checker.h"
#include "node/policy/policy_metadata.h"
#include "node/policy/policy_yaml.h"
#include "node/policy/rule_counters.h"

namespace tally {
namespace {

PolicySet Load(const std::string& text) {
  PolicySet set;
  const Status status = ParsePolicyFile("test.yaml", text, &set);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  set.Finish();
  return set;
}

struct Engine {
  ManualClock clock{1'700'000'000'000};
  Limiter limiter{Limiter::Options{.clock = &clock}};
  PolicyCheckScratch scratch;
  std::vector<DescriptorOutcome> outcomes;

  // One request of domain d with one descriptor per entry list.
  const std::vector<DescriptorOutcome>& Check(const PolicySet& set,
                                              std::vector<std::vector<DescriptorEntry>> request) {
    const std::vector<DescriptorView> views(request.begin(), request.end());
    CheckDescriptors(&limiter, set, "d", views, 1, &scratch, &outcomes);
    return outcomes;
  }
};

const std::string kQuota = R"(
domain: d
descriptors:
  - {key: regular, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: quota1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: quota2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: both, quota_mode: true, shadow_mode: true,
     rate_limit: {unit: minute, requests_per_unit: 0}}
)";

// Quota mode, as envoyproxy/ratelimit's service tests have it: over-quota
// descriptors pass while another quota descriptor is within its own.
TEST_CASE("policy modes: quota_mode allows over the limit while another quota has room") {
  const PolicySet set = Load(kQuota);
  Engine e;
  // Within every limit: OK.
  for (const DescriptorOutcome& o : e.Check(set, {{{"quota1", "a"}}, {{"quota2", "a"}}})) {
    CHECK(o.allowed());
    CHECK_FALSE(o.over_limit());
  }
  // quota1 is over, quota2 within: the request passes, quota1 marked over its limit.
  const auto& some = e.Check(set, {{{"quota1", "a"}}, {{"quota2", "a"}}});
  CHECK(some[0].allowed());
  CHECK(some[0].quota_exceeded);
  CHECK(some[0].over_limit());
  CHECK(some[1].allowed());
  CHECK_FALSE(some[1].quota_exceeded);
  CHECK(CountOutcomes(some).quota_exceeded == 1);
  CHECK(CountOutcomes(some).allowed == 2);
  // Both over: denied, as a regular limit would be.
  const auto& all = e.Check(set, {{{"quota1", "a"}}, {{"quota2", "a"}}});
  CHECK_FALSE(all[0].allowed());
  CHECK_FALSE(all[1].allowed());
  CHECK_FALSE(all[0].quota_exceeded);
  // A regular limit over denies whatever the quotas say; a quota within
  // while another is over still lets the quota pass, not the regular one.
  e.Check(set, {{{"regular", "r"}}});
  const auto& mixed = e.Check(set, {{{"regular", "r"}}, {{"quota1", "b"}}, {{"quota2", "b"}}});
  CHECK_FALSE(mixed[0].allowed());
  CHECK(mixed[1].allowed());
  // A lone quota descriptor over its limit is denied: every quota of the request is over.
  const auto& lone = e.Check(set, {{{"quota1", "b"}}});
  CHECK_FALSE(lone[0].allowed());
  // Shadow mode first: a shadow denial is allowed and is no quota excess.
  const auto& shadow = e.Check(set, {{{"both", "x"}}});
  CHECK(shadow[0].shadow_denied);
  CHECK_FALSE(shadow[0].quota_exceeded);
  CHECK_FALSE(shadow[0].over_limit());
}

// Scalars keep their YAML types; quoted ones are strings; maps and lists nest.
TEST_CASE("policy modes: metadata is read with YAML's types and written as JSON") {
  const PolicySet set = Load(R"(
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5}
    metadata:
      name: service_1
      port: 8080
      ratio: 0.5
      on: yes
      quoted: "42"
      none: ~
      tags: [x, 1]
      owner: {team: edge, "pager": true}
  - key: b
    metadata: {ignored: true}
)");
  const PolicyRule* rule = set.Match("d", std::vector<DescriptorEntry>{{"a", "1"}});
  REQUIRE(rule->metadata != nullptr);
  CHECK(rule->metadata_json ==
        R"({"name":"service_1","port":8080,"ratio":0.5,"on":true,"quoted":"42","none":null,)"
        R"("tags":["x",1],"owner":{"team":"edge","pager":true}})");
  CHECK(rule->metadata->Find("port")->kind == Metadata::Kind::kNumber);
  CHECK(set.Match("d", std::vector<DescriptorEntry>{{"b", "1"}}) == nullptr);  // no limit there
}

// envoyproxy/ratelimit's merge: the first descriptor's value wins; maps merge field by field.
TEST_CASE("policy modes: metadata of several descriptors merges, the first value winning") {
  const PolicySet set = Load(R"(
domain: d
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 5},
     metadata: {name: service_1, nested: {x: 1}}}
  - {key: b, rate_limit: {unit: second, requests_per_unit: 5},
     metadata: {name: service_2, other: 2, nested: {x: 9, y: 2}}}
)");
  Metadata merged;
  merged.kind = Metadata::Kind::kMap;
  for (const char* key : {"a", "b"}) {
    MergeMetadata(*set.Match("d", std::vector<DescriptorEntry>{{key, "1"}})->metadata, &merged);
  }
  CHECK(MetadataJson(merged) == R"({"name":"service_1","nested":{"x":1,"y":2},"other":2})");
}

// Metric names as envoyproxy/ratelimit's README examples 8, 10 and 11 give them.
TEST_CASE("policy modes: detailed_metric and value_to_metric shape rule metric names") {
  const PolicySet set = Load(R"(
domain: d
descriptors:
  - {key: key1, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: key1, value: value1, rate_limit: {unit: minute, requests_per_unit: 20}}
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - {key: subject_id, rate_limit: {unit: minute, requests_per_unit: 60}}
  - key: action
    value: read*
    value_to_metric: true
    descriptors:
      - {key: resource, rate_limit: {unit: minute, requests_per_unit: 100}}
  - key: api
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - {key: method, rate_limit: {unit: minute, requests_per_unit: 60}}
  - {key: plain, value: p*, rate_limit: {unit: minute, requests_per_unit: 1}}
)");
  const auto name = [&](std::vector<DescriptorEntry> entries) {
    std::vector<PolicySet::MatchedEntry> path;
    const PolicyRule* rule = set.Match("d", entries, &path);
    REQUIRE(rule != nullptr);
    return RuleMetricName(*rule, "d", entries, path);
  };
  CHECK(name({{"key1", "unspecified"}}) == "d.key1_unspecified");
  CHECK(name({{"key1", "value1"}}) == "d.key1_value1");
  CHECK(name({{"route", "api"}, {"http_method", "GET"}, {"subject_id", "123"}}) ==
        "d.route_api.http_method_GET.subject_id");
  CHECK(name({{"action", "readfile"}, {"resource", "documents"}}) == "d.action_readfile.resource");
  CHECK(name({{"api", "api/v1"}, {"method", "GET"}}) == "d.api_api/*.method");
  CHECK(name({{"plain", "pq"}}) == "d.plain_p*");
}

// Rules are counted under their names, up to the cap; beyond it under "_other".
TEST_CASE("policy modes: rule counters cap their series and count the rest as _other") {
  PolicySet set = Load(R"(
domain: d
descriptors:
  - {key: ip, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 1}}
)");
  auto counters = std::make_shared<RuleCounters>(2);
  set.SetRuleCounters(counters);
  Engine e;
  e.Check(set, {{{"user", "a"}}, {{"user", "b"}}});
  e.Check(set, {{{"user", "a"}}});
  for (const char* ip : {"1", "2", "3"}) e.Check(set, {{{"ip", ip}}});
  const auto series = counters->Read();
  REQUIRE(series.size() == 3);
  CHECK(series[0].first == "d.user");
  CHECK(series[0].second.allowed == 2);
  CHECK(series[0].second.denied == 1);
  CHECK(series[1].first == "d.ip_1");
  CHECK(series[2].first == "_other");
  CHECK(series[2].second.allowed == 2);  // ip 2 and 3
}

}  // namespace
}  // namespace tally
