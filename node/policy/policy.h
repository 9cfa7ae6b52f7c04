// PolicySet: limits configured once on the node, by domain and descriptor, in
// the configuration format of envoyproxy/ratelimit (node/policy/policy_yaml.h
// reads it), so that callers name what they limit instead of sending the
// whole limit with every check.
//
// A domain holds a tree of descriptor rules. A rule has a key, optionally a
// value (a value with '*' in it is a wildcard: each '*' matches any run of
// characters, none included), an optional limit, and optional nested rules.
// A request names a domain and one or more descriptors, each a list of
// (key, value) entries; Match walks the tree one entry per level, as
// envoyproxy/ratelimit does:
//  - at each level the most specific rule wins: key and value, then a
//    wildcard value (the first written that fits), then the key alone
//    (which limits each value apart);
//  - a limit applies only when its rule is reached by the descriptor's last
//    entry: a descriptor with more entries than the tree has levels matches
//    nothing.
// Each matched descriptor counts under its own key (CounterKey: the domain
// plus every entry of the request), so a rule with a key and no value keeps
// one counter per value; an entry that reached a wildcard level with
// share_threshold counts under the wildcard instead of its value, so every
// value it matches shares one counter. Across the descriptors of one
// request, a limit whose name another matched limit `replaces` is dropped
// (ReplacedRules).
//
// Thread safety: a PolicySet is immutable once built (its rule counters,
// node/policy/rule_counters.h, are thread-safe); any number of threads may
// read one. A new set replaces an old one as a whole (PolicyStore).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "node/common/descriptor.h"
#include "node/common/limit.h"
#include "node/policy/policy_metadata.h"
#include "node/policy/rule_counters.h"

namespace tally {

struct PolicyRule {
  static constexpr uint32_t kNoIndex = UINT32_MAX;

  // The rule's path as envoyproxy/ratelimit names it in its stats:
  // "domain.key_value.subkey" (a key without a value has no "_value").
  std::string full_key;
  std::string name;                   // rate_limit.name; may be empty
  std::vector<std::string> replaces;  // names of the limits this one replaces
  LimitSpec spec;                     // algorithm, requests per window, window_ms
  bool unlimited = false;             // matched and reported, never limited or counted
  bool shadow_mode = false;           // counted and reported, but always allowed
  // Soft: over its limit a descriptor is still allowed while another
  // quota-mode descriptor of the same request is within its own
  // (node/policy/policy_checker.h).
  bool quota_mode = false;
  // Metric names carry every entry's value (RuleMetricName).
  bool detailed_metric = false;
  std::shared_ptr<const Metadata> metadata;  // null: none
  std::string metadata_json;                 // metadata as JSON; empty: none
  // Its place among the set's rules (counter slots); kNoIndex for a rule
  // made outside a set (a caller's override).
  uint32_t index = kNoIndex;
};

class PolicySet {
 public:
  // One level of a domain's descriptor tree.
  struct Node {
    std::unique_ptr<PolicyRule> rule;  // null: a placeholder level without a limit
    std::map<std::pair<std::string, std::string>, Node> by_value;  // (key, value)
    // The by_value entries whose value holds a '*', in the order written:
    // the first that fits wins.
    std::vector<std::pair<std::string, std::string>> wildcards;
    std::map<std::string, Node> by_key;  // key alone: every value
    bool value_to_metric = false;        // metric names carry the request's value here
    bool share_threshold = false;        // a wildcard whose values share one counter
  };

  // How one entry of a descriptor reached its level (Match fills one per entry).
  struct MatchedEntry {
    const Node* level = nullptr;
    std::string_view wildcard;  // the wildcard value it matched; empty: key and value, or key
    bool by_value = false;      // matched key and value exactly
    // The value to count it under: the wildcard when its level shares one
    // counter among the wildcard's values (share_threshold), else its own.
    std::string_view CountedValue(std::string_view value) const {
      return level->share_threshold && !wildcard.empty() ? wildcard : value;
    }
  };

  // Adds a domain; InvalidArgument when it is already there.
  Status AddDomain(const std::string& domain, Node root);
  // The root of `domain` as added so far, to merge another file's
  // descriptors into (PolicyMergeDomains); nullptr when absent.
  Node* MutableDomain(const std::string& domain);
  // Numbers the rules (PolicyRule::index), counts them and takes the
  // fingerprint; call once, after the last AddDomain or merge.
  void Finish();

  bool HasDomain(std::string_view domain) const;
  // Domains are counted in metrics under a slot (node/common/front_counters.h)
  // that stays the same across reloads: PolicyStore assigns them before it
  // publishes the set. DomainSlot is FrontCounters::kOtherDomain for a
  // domain without one (unknown, or beyond the named slots).
  void SetDomainSlot(const std::string& domain, size_t slot);
  size_t DomainSlot(std::string_view domain) const;
  std::vector<std::string> DomainNames() const;
  size_t domain_count() const { return domains_.size(); }
  // Rules with a limit (or unlimited), over all domains.
  size_t rule_count() const { return rule_count_; }
  // A fingerprint of every domain's rules, to tell whether a reload changed anything.
  const std::string& fingerprint() const { return fingerprint_; }

  // Where checks decided under this set are counted by rule; null (the
  // default): nowhere. PolicyStore gives every set it loads the same one.
  void SetRuleCounters(std::shared_ptr<RuleCounters> counters);
  // Counts one descriptor's outcome under `rule` (matched with `path`).
  void CountRule(const PolicyRule& rule, std::string_view domain,
                 std::span<const DescriptorEntry> entries, std::span<const MatchedEntry> path,
                 RuleCounters::Outcome outcome) const;

  // The rule the descriptor reaches in `domain`; nullptr when the domain is
  // unknown or no rule with a limit matches (the caller answers OK, no limit).
  // With `path`, how each entry matched (one per entry when a rule matched).
  const PolicyRule* Match(std::string_view domain, std::span<const DescriptorEntry> entries,
                          std::vector<MatchedEntry>* path = nullptr) const;

 private:
  std::map<std::string, Node, std::less<>> domains_;
  std::map<std::string, size_t, std::less<>> slots_;
  size_t rule_count_ = 0;
  std::string fingerprint_;
  std::shared_ptr<RuleCounters> rule_counters_;
  // The counter slot of each rule's name (RuleCounters::kUnassigned until
  // first counted), by PolicyRule::index.
  std::unique_ptr<std::atomic<uint32_t>[]> rule_slots_;
};

// Whether `value` fits the wildcard `pattern` (each '*' any run of
// characters, none included; the rest literally, in order).
bool WildcardMatches(std::string_view pattern, std::string_view value);

// The engine key that counts one descriptor of `domain`: readable
// ("domain|key=value|key=value", with '\', '|' and '=' escaped by '\'); when
// that would exceed kMaxKeyBytes, "domain|#" and the SHA-256 of the readable
// form in hex (a 128-byte domain at most, so this always fits). With `path`
// (Match's, one per entry), each entry counts under its CountedValue.
std::string CounterKey(std::string_view domain, std::span<const DescriptorEntry> entries,
                       std::span<const PolicySet::MatchedEntry> path = {});

// The name `rule` is counted under in metrics for one descriptor, as
// envoyproxy/ratelimit names its stats: the domain, then per entry "key" or
// "key_value". The value is there when the entry matched a value; when it
// matched a wildcard, the wildcard, or the request's value if its level has
// value_to_metric (and no share_threshold); when it matched the key alone,
// the request's value if its level has value_to_metric. With the rule's
// detailed_metric every entry carries the request's value (or the wildcard
// where its level shares a counter).
std::string RuleMetricName(const PolicyRule& rule, std::string_view domain,
                           std::span<const DescriptorEntry> entries,
                           std::span<const PolicySet::MatchedEntry> path);

// For each matched rule of one request (nullptr where a descriptor matched
// none), whether another matched rule replaces it (by name): such a rule is
// neither checked nor counted.
std::vector<bool> ReplacedRules(std::span<const PolicyRule* const> matched);

}  // namespace tally
