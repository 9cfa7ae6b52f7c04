// envoyproxy/ratelimit's configuration format as its current version has it:
// which files load and which are refused (one case per configuration its
// tests load, written here from what they check), the units week, month and
// year, wildcards anywhere in a value, share_threshold, merged domains, and
// shadow_mode per descriptor.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/policy/policy.h"
#include "node/policy/policy_checker.h"
#include "node/policy/policy_yaml.h"

namespace tally {
namespace {

constexpr uint64_t kDayMs = 86'400'000;

// The parts, concatenated (a file's text around a shared line).
std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string text;
  for (const std::string_view part : parts) text.append(part);
  return text;
}

// Loads the files in order into one set; the status of the first refusal, or OK.
Status LoadFiles(const std::vector<std::string>& texts, PolicySet* set, bool merge = false) {
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string file = Cat({"f", std::to_string(i), ".yaml"});
    if (Status status = ParsePolicyFile(file, texts[i], set, {.merge_domains = merge});
        !status.ok()) {
      return status;
    }
  }
  set->Finish();
  return Status::OK();
}

PolicySet Load(const std::string& text, bool merge = false) {
  PolicySet set;
  const Status status = LoadFiles({text}, &set, merge);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return set;
}

const PolicyRule* Match(const PolicySet& set, std::vector<DescriptorEntry> entries) {
  return set.Match("d", entries);
}

struct Engine {
  ManualClock clock{1'700'000'000'000};
  Limiter limiter{Limiter::Options{.clock = &clock}};
  PolicyCheckScratch scratch;
  std::vector<DescriptorOutcome> outcomes;

  // Checks one descriptor of domain d once; whether it was allowed.
  bool Allowed(const PolicySet& set, std::vector<DescriptorEntry> entries) {
    const std::vector<DescriptorView> request = {entries};
    CheckDescriptors(&limiter, set, "d", request, 1, &scratch, &outcomes);
    return outcomes.front().allowed();
  }
};

struct FileCase {
  const char* what;
  std::vector<std::string> files;
  bool merge;
  const char* refusal;  // nullptr: loads
};

// Each configuration envoyproxy/ratelimit's config tests load, as tally's own
// fixture: loaded or refused as envoyproxy/ratelimit does.
TEST_CASE("policy format: files load or are refused as in envoyproxy/ratelimit") {
  const std::string_view limit = "    rate_limit: {unit: minute, requests_per_unit: 10}\n";
  const std::vector<FileCase> cases = {
      {"nesting, key only, a value without a limit, unlimited, named",
       {"domain: d\ndescriptors:\n  - key: a\n    value: b\n    descriptors:\n      - key: c\n"
        "        rate_limit: {unit: second, requests_per_unit: 5}\n  - key: e\n    value: f\n"
        "  - key: g\n    rate_limit: {unlimited: true}\n  - key: h\n"
        "    rate_limit: {name: h_limit, unit: day, requests_per_unit: 1}\n"},
       false,
       nullptr},
      {"every descriptor key",
       {Cat({"domain: d\ndescriptors:\n  - key: a\n    value: b*\n", limit,
             "    shadow_mode: true\n    quota_mode: true\n    detailed_metric: true\n"
             "    value_to_metric: true\n    share_threshold: true\n    metadata: {name: svc}\n"})},
       false,
       nullptr},
      {"units week, month and year",
       {"domain: d\ndescriptors:\n  - key: w\n    rate_limit: {unit: week, requests_per_unit: 1}\n"
        "  - key: m\n    rate_limit: {unit: MONTH, requests_per_unit: 1}\n"
        "  - key: y\n    rate_limit: {unit: year, requests_per_unit: 1}\n"},
       false,
       nullptr},
      {"wildcards trailing, inside and several",
       {Cat({"domain: d\ndescriptors:\n  - key: a\n    value: x*\n", limit,
             "  - key: a\n    value: x*y\n", limit, "  - key: a\n    value: x*y*z\n", limit})},
       false,
       nullptr},
      {"unlimited with a requests_per_unit it ignores",
       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, "
        "requests_per_unit: 5}\n"},
       false,
       nullptr},
      {"two files of one domain, merged",
       {Cat({"domain: d\ndescriptors:\n  - key: a\n", limit}),
        Cat({"domain: d\ndescriptors:\n  - key: b\n", limit})},
       true,
       nullptr},
      {"two files of one domain", {"domain: d\n", "domain: d\n"}, false, "defined twice"},
      {"a descriptor in two merged files",
       {Cat({"domain: d\ndescriptors:\n  - key: a\n", limit}),
        Cat({"domain: d\ndescriptors:\n  - key: a\n", limit})},
       true,
       "f1.yaml:3: duplicate descriptor 'd.a'"},
      {"an empty domain", {"domain: ''\n"}, false, "needs a non-empty domain"},
      {"an empty key", {"domain: d\ndescriptors:\n  - value: v\n"}, false, "non-empty key"},
      {"a duplicate key",
       {"domain: d\ndescriptors:\n  - {key: a, value: b}\n  - {key: a, value: b}\n"},
       false,
       "duplicate descriptor 'd.a_b'"},
      {"a bad unit",
       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: foo, requests_per_unit: 1}\n"},
       false,
       "unit 'foo' is not one of"},
      {"a limit replacing itself",
       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: n, replaces: [{name: n}], "
        "unit: second, requests_per_unit: 1}\n"},
       false,
       "cannot replace itself"},
      {"an empty replaces entry",
       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: n, replaces: [{name: }], "
        "unit: second, requests_per_unit: 1}\n"},
       false,
       "needs a name"},
      {"bad YAML", {"'''\n"}, false, "f0.yaml"},
      {"a misspelt descriptor key",
       {"domain: d\ndescriptors:\n  - key: a\n    ratelimit: {}\n"},
       false,
       "unknown key 'ratelimit'"},
      {"a misspelt rate_limit key",
       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requestsperunit: 5}\n"},
       false,
       "unknown key 'requestsperunit'"},
      {"a key that is not a string", {"0.25: d\n"}, false, "unknown key '0.25'"},
      {"a list of other than mappings",
       {"domain: d\ndescriptors: [a, b]\n"},
       false,
       "a descriptor must be a mapping"},
      {"unlimited with a unit",
       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n"},
       false,
       "takes no unit"},
      {"share_threshold without a wildcard",
       {Cat({"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
             limit})},
       false,
       "share_threshold needs a wildcard value"},
      {"metadata that is not a mapping",
       {Cat({"domain: d\ndescriptors:\n  - key: a\n", limit, "    metadata: [1, 2]\n"})},
       false,
       "metadata must be a mapping"},
  };
  for (const FileCase& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    PolicySet set;
    const Status status = LoadFiles(c.files, &set, c.merge);
    if (c.refusal == nullptr) {
      CHECK_MESSAGE(status.ok(), status.ToString());
    } else {
      CHECK_MESSAGE(status.message().find(c.refusal) != std::string_view::npos, status.ToString());
    }
  }
}

// A week, a month and a year are 7, 30 and 365 days, aligned to the Unix epoch.
TEST_CASE("policy format: week, month and year windows are envoyproxy/ratelimit's") {
  const PolicySet set = Load(
      "domain: d\ndescriptors:\n  - key: w\n    rate_limit: {unit: week, requests_per_unit: 1}\n"
      "  - key: m\n    rate_limit: {unit: month, requests_per_unit: 1}\n"
      "  - key: y\n    rate_limit: {unit: year, requests_per_unit: 1}\n");
  CHECK(Match(set, {{"w", "1"}})->spec.window_ms == 7 * kDayMs);
  CHECK(Match(set, {{"m", "1"}})->spec.window_ms == 30 * kDayMs);
  CHECK(Match(set, {{"y", "1"}})->spec.window_ms == 365 * kDayMs);
  Engine e;
  for (const char* key : {"w", "m", "y"}) {
    CAPTURE(key);
    const uint64_t window_ms = Match(set, {{key, "1"}})->spec.window_ms;
    CHECK(e.Allowed(set, {{key, "1"}}));
    const auto now_ms = static_cast<uint64_t>(e.clock.WallMs());
    CHECK(e.outcomes.front().decision.reset_after_ms == window_ms - now_ms % window_ms);
    CHECK_FALSE(e.Allowed(set, {{key, "1"}}));
  }
  // At the year's boundary (a multiple of 365 days since the epoch) it starts again.
  const int64_t year_ms = 365 * static_cast<int64_t>(kDayMs);
  e.clock.SetWallMs((e.clock.WallMs() / year_ms + 1) * year_ms);
  CHECK(e.Allowed(set, {{"y", "1"}}));
}

// limit * window_ms stays within 10^9 over 30 days, so the engine's arithmetic stays exact:
// a year takes at most 82,191,780.
TEST_CASE("policy format: a limit over a year is capped so its arithmetic fits 64 bits") {
  Load(
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: "
      "1000000000}\n");
  PolicySet set;
  const Status status = LoadFiles(
      {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: "
       "82191781}\n"},
      &set);
  CHECK(status.message() ==
        "f0.yaml:4: requests_per_unit 82191781 is over 82191780, the most a window of "
        "31536000000 ms takes");
  CHECK(MaxLimitFor(kMaxWindowMs) == 82'191'780);
  CHECK(MaxLimitFor(30 * kDayMs) == kMaxLimit);
  CHECK(MaxLimitFor(31 * kDayMs) < kMaxLimit);
  CHECK(ValidateSpec({Algorithm::kTokenBucket, 82'191'780, kMaxWindowMs}).ok());
  CHECK_FALSE(ValidateSpec({Algorithm::kFixedWindow, 82'191'781, kMaxWindowMs}).ok());
}

// Each '*' matches any run of characters; the first wildcard written that fits wins.
TEST_CASE("policy format: wildcards may stand anywhere in a value") {
  CHECK(WildcardMatches("foo*", "foo"));
  CHECK(WildcardMatches("foo*", "foobar"));
  CHECK_FALSE(WildcardMatches("foo*", "fo"));
  CHECK(WildcardMatches("/api/*/action", "/api/123/action"));
  CHECK_FALSE(WildcardMatches("/api/*/action", "/api/123/other"));
  CHECK(WildcardMatches("svc*ep*rpc", "svceprpc"));
  CHECK(WildcardMatches("svc*ep*rpc", "svcXepYrpc"));
  CHECK_FALSE(WildcardMatches("svc*ep*rpc", "svcABCrpc"));
  CHECK_FALSE(WildcardMatches("ab*ba", "aba"));  // the head and tail may not overlap
  CHECK(WildcardMatches("*", ""));
  const PolicySet set = Load(R"(
domain: d
descriptors:
  - {key: path, value: /api/*/action, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: path, value: /api/*, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: path, value: /api/v1/action, rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: path, rate_limit: {unit: minute, requests_per_unit: 4}}
)");
  CHECK(Match(set, {{"path", "/api/7/action"}})->spec.limit == 1);
  CHECK(Match(set, {{"path", "/api/7/other"}})->spec.limit == 2);
  CHECK(Match(set, {{"path", "/api/v1/action"}})->spec.limit == 3);  // the value first
  CHECK(Match(set, {{"path", "/web"}})->spec.limit == 4);
}

// share_threshold: every value of the wildcard counts under one counter; without it each its own.
TEST_CASE("policy format: share_threshold shares one counter among a wildcard's values") {
  const PolicySet set = Load(R"(
domain: d
descriptors:
  - {key: files, value: files/*, share_threshold: true,
     rate_limit: {unit: hour, requests_per_unit: 2}}
  - {key: own, value: own/*, share_threshold: false,
     rate_limit: {unit: hour, requests_per_unit: 2}}
  - {key: file, value: test1, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: file, value: test*, share_threshold: true,
     rate_limit: {unit: hour, requests_per_unit: 2}}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - {key: resource, value: res*v2, share_threshold: true,
         rate_limit: {unit: hour, requests_per_unit: 1}}
)");
  Engine e;
  CHECK(e.Allowed(set, {{"files", "files/a.pdf"}}));
  CHECK(e.Allowed(set, {{"files", "files/b.csv"}}));
  CHECK_FALSE(e.Allowed(set, {{"files", "files/c.txt"}}));  // the shared 2 are spent
  for (int i = 0; i < 2; ++i) CHECK(e.Allowed(set, {{"own", "own/a"}}));
  CHECK_FALSE(e.Allowed(set, {{"own", "own/a"}}));
  CHECK(e.Allowed(set, {{"own", "own/b"}}));  // its own counter
  // The value that matches exactly keeps its own limit and counter.
  CHECK(e.Allowed(set, {{"file", "test1"}}));
  CHECK_FALSE(e.Allowed(set, {{"file", "test1"}}));
  CHECK(e.Allowed(set, {{"file", "test2"}}));
  CHECK(e.Allowed(set, {{"file", "test23"}}));
  CHECK_FALSE(e.Allowed(set, {{"file", "test123"}}));
  // Shared at two levels: one counter for every (t*prod, res*v2) pair.
  CHECK(e.Allowed(set, {{"tenant", "t1prod"}, {"resource", "resAv2"}}));
  CHECK_FALSE(e.Allowed(set, {{"tenant", "t99prod"}, {"resource", "resBBBv2"}}));

  std::vector<PolicySet::MatchedEntry> path;
  const std::vector<DescriptorEntry> entries = {{"tenant", "t1prod"}, {"resource", "resAv2"}};
  REQUIRE(set.Match("d", entries, &path) != nullptr);
  CHECK(CounterKey("d", entries, path) == "d|tenant=t*prod|resource=res*v2");
}

// shadow_mode applies to its descriptor's own limit, not to those nested below it.
TEST_CASE("policy format: a descriptor's shadow_mode and quota_mode are its own") {
  const PolicySet set = Load(R"(
domain: d
descriptors:
  - key: service
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - {key: user, rate_limit: {unit: second, requests_per_unit: 20}}
)");
  const PolicyRule* service = Match(set, {{"service", "a"}});
  CHECK(service->shadow_mode);
  CHECK(service->quota_mode);
  const PolicyRule* user = Match(set, {{"service", "a"}, {"user", "b"}});
  CHECK_FALSE(user->shadow_mode);
  CHECK_FALSE(user->quota_mode);
}

// With merge_domains the files' descriptors form one domain; wildcards keep the files' order.
TEST_CASE("policy format: merged domains hold every file's descriptors") {
  PolicySet set;
  REQUIRE(LoadFiles({"domain: d\ndescriptors:\n  - {key: a, value: x*, rate_limit: {unit: "
                     "minute, requests_per_unit: 1}}\n",
                     "domain: d\nshadow_mode: true\ndescriptors:\n  - {key: a, value: xy*, "
                     "rate_limit: {unit: minute, requests_per_unit: 2}}\n  - {key: b, rate_limit: "
                     "{unit: minute, requests_per_unit: 3}}\n"},
                    &set, true)
              .ok());
  CHECK(set.domain_count() == 1);
  CHECK(set.rule_count() == 3);
  CHECK(Match(set, {{"a", "xyz"}})->spec.limit == 1);  // the first file's wildcard first
  CHECK_FALSE(Match(set, {{"a", "xyz"}})->shadow_mode);
  CHECK(Match(set, {{"b", "1"}})->shadow_mode);  // the second file's shadow_mode: its own
  // A refused merge leaves the set as it was.
  const Status refused = ParsePolicyFile(
      "g.yaml", "domain: d\ndescriptors:\n  - key: c\n  - key: b\n", &set, {.merge_domains = true});
  CHECK(refused.message() == "g.yaml:4: duplicate descriptor 'd.b'");
  CHECK(Match(set, {{"c", "1"}}) == nullptr);
}

}  // namespace
}  // namespace tally
