// Policies: envoyproxy/ratelimit's configuration format and matching rules,
// tally's additions, refusals with file and line, and checks through the
// engine on a ManualClock.
#include "node/policy/policy.h"

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/policy/policy_checker.h"
#include "node/policy/policy_yaml.h"

namespace tally {
namespace {

PolicySet Load(const std::string& text) {
  PolicySet set;
  const Status status = ParsePolicyFile("test.yaml", text, &set);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  set.Finish();
  return set;
}

std::string Refusal(const std::string& text) {
  PolicySet set;
  const Status status = ParsePolicyFile("bad.yaml", text, &set);
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == Status::Code::kInvalidArgument);
  return std::string(status.message());
}

const PolicyRule* Match(const PolicySet& set, std::string_view domain,
                        std::vector<DescriptorEntry> entries) {
  return set.Match(domain, entries);
}

// envoyproxy/ratelimit's example 2: nesting, and a key without a value limits each value.
TEST_CASE("policy: nested descriptors and keys without values match as in envoyproxy/ratelimit") {
  const PolicySet set = Load(R"(
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
)");
  const PolicyRule* nested =
      Match(set, "messaging", {{"message_type", "marketing"}, {"to_number", "2061111111"}});
  REQUIRE(nested != nullptr);
  CHECK(nested->spec.limit == 5);
  CHECK(nested->spec.window_ms == 86'400'000);
  CHECK(nested->spec.algorithm ==
        Algorithm::kFixedWindow);  // envoyproxy/ratelimit's only algorithm
  CHECK(nested->full_key == "messaging.message_type_marketing.to_number");
  const PolicyRule* top = Match(set, "messaging", {{"to_number", "2061111111"}});
  REQUIRE(top != nullptr);
  CHECK(top->spec.limit == 100);
  // The placeholder level has no limit of its own; another value does not match.
  CHECK(Match(set, "messaging", {{"message_type", "marketing"}}) == nullptr);
  CHECK(Match(set, "messaging", {{"message_type", "transactional"}, {"to_number", "1"}}) ==
        nullptr);
  CHECK(Match(set, "other", {{"to_number", "1"}}) == nullptr);
}

// Example 3: key and value are tried before the key alone.
TEST_CASE("policy: the most specific rule at a level wins") {
  const PolicySet set = Load(R"(
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 7}
)");
  CHECK(Match(set, "edge_proxy_per_ip", {{"remote_address", "50.0.0.1"}})->spec.limit == 10);
  CHECK(Match(set, "edge_proxy_per_ip", {{"remote_address", "50.0.0.5"}})->spec.limit == 0);
  CHECK(Match(set, "edge_proxy_per_ip", {{"path", "/api/users"}})->spec.limit == 7);
  CHECK(Match(set, "edge_proxy_per_ip", {{"path", "/web"}}) == nullptr);
}

// Example 4: a descriptor deeper than the tree matches nothing.
TEST_CASE("policy: a limit applies only at the descriptor's own depth") {
  const PolicySet set = Load(R"(
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {requests_per_unit: 300, unit: second}
)");
  CHECK(Match(set, "example4", {{"key", "value"}}) != nullptr);
  CHECK(Match(set, "example4", {{"key", "value"}, {"subkey", "subvalue"}}) == nullptr);
}

// Examples 5-7: unlimited, shadow mode, replaces; and tally's algorithm and window_ms.
TEST_CASE("policy: unlimited, shadow_mode, replaces and tally's additions are read") {
  const PolicySet set = Load(R"(
domain: internal
shadow_mode: false
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: user
    value: user-a
    shadow_mode: true
    rate_limit: {requests_per_unit: 10, unit: second, name: specific_limit}
  - key: user
    value: user-b
    detailed_metric: true
    rate_limit:
      requests_per_unit: 20
      unit: SECOND
      replaces:
        - name: specific_limit
  - key: api
    rate_limit: {requests_per_unit: 50, window_ms: 1500, algorithm: sliding_counter}
)");
  CHECK(Match(set, "internal", {{"ldap", "x"}})->unlimited);
  const PolicyRule* shadow = Match(set, "internal", {{"user", "user-a"}});
  CHECK(shadow->shadow_mode);
  CHECK(shadow->name == "specific_limit");
  const PolicyRule* replacing = Match(set, "internal", {{"user", "user-b"}});
  CHECK(replacing->replaces == std::vector<std::string>{"specific_limit"});
  const PolicyRule* api = Match(set, "internal", {{"api", "k"}});
  CHECK(api->spec.algorithm == Algorithm::kSlidingWindowCounter);
  CHECK(api->spec.window_ms == 1'500);
  CHECK(set.rule_count() == 4);

  const std::vector<const PolicyRule*> matched = {shadow, replacing, nullptr};
  CHECK(ReplacedRules(matched) == std::vector<bool>{true, false, false});
}

// A domain in shadow mode puts every one of its limits in shadow mode.
TEST_CASE("policy: shadow_mode on the domain covers every limit") {
  const PolicySet set = Load(R"(
domain: trial
shadow_mode: true
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {requests_per_unit: 1, unit: minute}
)");
  CHECK(Match(set, "trial", {{"a", "1"}, {"b", "2"}})->shadow_mode);
}

// Every kind of bad file is refused with the file, the line and the reason.
TEST_CASE("policy: bad files are refused naming file, line and reason") {
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n") ==
        "bad.yaml:4: unknown key 'rate_limt' in a descriptor");
  CHECK(Refusal("descriptors: []\n").find("needs a non-empty domain") != std::string::npos);
  CHECK(Refusal("domain: d\ndescriptors:\n  - value: x\n") ==
        "bad.yaml:3: a descriptor needs a non-empty key");
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, "
                "requests_per_unit: 1}\n") ==
        "bad.yaml:4: unit 'fortnight' is not one of second, minute, hour, day, week, month, year");
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                "requests_per_unit: -1}\n") ==
        "bad.yaml:4: requests_per_unit must be a whole number");
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                "requests_per_unit: 2000000000}\n") ==
        "bad.yaml:4: requests_per_unit 2000000000 is over 1000000000");
  CHECK(
      Refusal(
          "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n")
          .find("an unlimited rate_limit takes no unit") != std::string::npos);
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                "requests_per_unit: 1, algorithm: leaky}\n")
            .find("unknown algorithm 'leaky'") != std::string::npos);
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n  - key: a\n") ==
        "bad.yaml:4: duplicate descriptor 'd.a'");
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n")
            .find("needs a unit") != std::string::npos);
  CHECK(Refusal("domain: d\n  descriptors: [\n").find("bad.yaml:") == 0);  // not YAML at all
  CHECK(Refusal("- just\n- a list\n") == "bad.yaml:1: a policy file must be a mapping");
  CHECK(Refusal("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n") ==
        "bad.yaml:4: shadow_mode must be true or false");
}

// Two files may not define one domain.
TEST_CASE("policy: a domain defined twice is refused") {
  PolicySet set;
  REQUIRE(ParsePolicyFile("a.yaml", "domain: d\n", &set).ok());
  const Status second = ParsePolicyFile("b.yaml", "domain: d\n", &set);
  CHECK(second.message() == "b.yaml:1: domain 'd' is defined twice");
}

// Counter keys are readable, unambiguous under escaping, and hashed when too long.
TEST_CASE("policy: counter keys are unambiguous and fit the engine's key limit") {
  const std::vector<DescriptorEntry> plain = {{"user", "42"}, {"path", "/a"}};
  CHECK(CounterKey("api", plain) == "api|user=42|path=/a");
  const std::vector<DescriptorEntry> tricky = {{"a|b", "c=d"}};
  const std::vector<DescriptorEntry> split = {{"a", "b|c=d"}};
  CHECK(CounterKey("x", tricky) == "x|a\\|b=c\\=d");
  CHECK(CounterKey("x", tricky) != CounterKey("x", split));
  const std::string long_value(300, 'v');
  const std::vector<DescriptorEntry> long_entry = {{"k", long_value}};
  const std::string hashed = CounterKey("api", long_entry);
  CHECK(hashed.size() == 3 + 2 + 64);
  CHECK(hashed.starts_with("api|#"));
  CHECK(ValidateKey(hashed).ok());
  const std::string other_value = std::string(299, 'v') + "w";
  const std::vector<DescriptorEntry> other_entry = {{"k", other_value}};
  CHECK(CounterKey("api", other_entry) != hashed);
}

struct Engine {
  Engine() : limiter(Options(&clock)) {}
  static Limiter::Options Options(const Clock* clock) {
    Limiter::Options options;
    options.clock = clock;
    return options;
  }
  ManualClock clock{1'700'000'000'000};
  Limiter limiter;
  PolicyCheckScratch scratch;
  std::vector<DescriptorOutcome> outcomes;
};

// Every descriptor is decided: limited, unlimited, no limit, shadow denial, replaced.
TEST_CASE("policy: a request's descriptors are checked one by one through the engine") {
  const PolicySet set = Load(R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: vip
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: per_user}]}
  - key: internal
    rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  Engine e;
  const std::vector<DescriptorEntry> user = {{"user", "alice"}};
  const std::vector<DescriptorEntry> internal = {{"internal", "x"}};
  const std::vector<DescriptorEntry> unknown = {{"color", "red"}};
  const std::vector<DescriptorEntry> trial = {{"trial", "t"}};
  const std::vector<DescriptorView> request = {user, internal, unknown, trial};
  for (int i = 0; i < 2; ++i) {
    CheckDescriptors(&e.limiter, set, "api", request, 1, &e.scratch, &e.outcomes);
  }
  REQUIRE(e.outcomes.size() == 4);
  CHECK(e.outcomes[0].kind == DescriptorOutcome::Kind::kLimited);
  CHECK(e.outcomes[0].decision.allowed);
  CHECK(e.outcomes[0].decision.remaining == 0);
  CHECK(e.outcomes[1].kind == DescriptorOutcome::Kind::kUnlimited);
  CHECK(e.outcomes[2].kind == DescriptorOutcome::Kind::kNoLimit);
  CHECK(e.outcomes[3].shadow_denied);  // the second trial hit is over 1/minute, but allowed
  CHECK(e.outcomes[3].allowed());

  CheckDescriptors(&e.limiter, set, "api", request, 0, &e.scratch,
                   &e.outcomes);  // 0 hits count as 1
  CHECK_FALSE(e.outcomes[0].allowed());
  CHECK(e.outcomes[0].decision.retry_after_ms > 0);

  // With a vip descriptor in the same request, per_user is replaced: not checked, not counted.
  const std::vector<DescriptorEntry> vip = {{"vip", "alice"}};
  const std::vector<DescriptorView> with_vip = {user, vip};
  CheckDescriptors(&e.limiter, set, "api", with_vip, 1, &e.scratch, &e.outcomes);
  CHECK(e.outcomes[0].kind == DescriptorOutcome::Kind::kNoLimit);
  CHECK(e.outcomes[1].allowed());

  // An unknown domain limits nothing.
  CheckDescriptors(&e.limiter, set, "nope", request, 1, &e.scratch, &e.outcomes);
  for (const DescriptorOutcome& outcome : e.outcomes) {
    CHECK(outcome.kind == DescriptorOutcome::Kind::kNoLimit);
  }
}

// A key without a value keeps one counter per value; the window follows the clock.
TEST_CASE("policy: each value of a key-only rule has its own counter") {
  const PolicySet set = Load(
      "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: "
      "1}\n");
  Engine e;
  const std::vector<DescriptorEntry> a = {{"ip", "1.1.1.1"}};
  const std::vector<DescriptorEntry> b = {{"ip", "2.2.2.2"}};
  const std::vector<DescriptorView> first = {a, b};
  CheckDescriptors(&e.limiter, set, "d", first, 1, &e.scratch, &e.outcomes);
  CHECK(e.outcomes[0].allowed());
  CHECK(e.outcomes[1].allowed());
  const std::vector<DescriptorView> again = {a};
  CheckDescriptors(&e.limiter, set, "d", again, 1, &e.scratch, &e.outcomes);
  CHECK_FALSE(e.outcomes[0].allowed());
  e.clock.AdvanceMs(1'000);
  CheckDescriptors(&e.limiter, set, "d", again, 1, &e.scratch, &e.outcomes);
  CHECK(e.outcomes[0].allowed());
}

}  // namespace
}  // namespace tally
