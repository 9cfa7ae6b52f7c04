// PolicySet: limits configured once on the node, by domain and descriptor, in
// the configuration format of envoyproxy/ratelimit (node/policy/policy_yaml.h
// reads it), so that callers name what they limit instead of sending the
// whole limit with every check.
//
// A domain holds a tree of descriptor rules. A rule has a key, optionally a
// value (a value ending in '*' matches every value with that prefix), an
// optional limit, and optional nested rules. A request names a domain and
// one or more descriptors, each a list of (key, value) entries; Match walks
// the tree one entry per level, as envoyproxy/ratelimit does:
//  - at each level the most specific rule wins: key and value, then a
//    wildcard value, then the key alone (which limits each value apart);
//  - a limit applies only when its rule is reached by the descriptor's last
//    entry: a descriptor with more entries than the tree has levels matches
//    nothing.
// Each matched descriptor counts under its own key (CounterKey: the domain
// plus every entry of the request), so a rule with a key and no value keeps
// one counter per value. Across the descriptors of one request, a limit whose
// name another matched limit `replaces` is dropped (Resolve).
//
// Thread safety: a PolicySet is immutable once built; any number of threads
// may read one. A new set replaces an old one as a whole (PolicyStore).
#pragma once

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

namespace tally {

struct PolicyRule {
  // The rule's path as envoyproxy/ratelimit names it in its stats:
  // "domain.key_value.subkey" (a key without a value has no "_value").
  std::string full_key;
  std::string name;                   // rate_limit.name; may be empty
  std::vector<std::string> replaces;  // names of the limits this one replaces
  LimitSpec spec;                     // algorithm, requests per window, window_ms
  bool unlimited = false;             // matched and reported, never limited or counted
  bool shadow_mode = false;           // counted and reported, but always allowed
};

class PolicySet {
 public:
  // One level of a domain's descriptor tree.
  struct Node {
    std::unique_ptr<PolicyRule> rule;  // null: a placeholder level without a limit
    std::map<std::pair<std::string, std::string>, Node> by_value;  // (key, value)
    // The by_value entries whose value ends in '*', in the order written:
    // the first whose prefix fits wins.
    std::vector<std::pair<std::string, std::string>> wildcards;
    std::map<std::string, Node> by_key;  // key alone: every value
  };

  // Adds a domain; InvalidArgument when it is already there.
  Status AddDomain(const std::string& domain, Node root);

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

  // The rule the descriptor reaches in `domain`; nullptr when the domain is
  // unknown or no rule with a limit matches (the caller answers OK, no limit).
  const PolicyRule* Match(std::string_view domain, std::span<const DescriptorEntry> entries) const;

 private:
  std::map<std::string, Node, std::less<>> domains_;
  std::map<std::string, size_t, std::less<>> slots_;
  size_t rule_count_ = 0;
  std::string fingerprint_;
};

// The engine key that counts one descriptor of `domain`: readable
// ("domain|key=value|key=value", with '\', '|' and '=' escaped by '\'); when
// that would exceed kMaxKeyBytes, "domain|#" and the SHA-256 of the readable
// form in hex (a 128-byte domain at most, so this always fits).
std::string CounterKey(std::string_view domain, std::span<const DescriptorEntry> entries);

// For each matched rule of one request (nullptr where a descriptor matched
// none), whether another matched rule replaces it (by name): such a rule is
// neither checked nor counted.
std::vector<bool> ReplacedRules(std::span<const PolicyRule* const> matched);

}  // namespace tally
