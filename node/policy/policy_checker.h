// CheckDescriptors: one request by domain and descriptors, decided by the
// engine under the node's policies. Every front that checks by policy (the
// Cap'n Proto protocol, Envoy's gRPC service) answers through it, so they
// all mean the same thing.
//
// Per descriptor, in order:
//  - no rule matches (unknown domain, no limit at that depth), or the rule
//    is replaced by another matched rule: kNoLimit, nothing counted;
//  - an unlimited rule: kUnlimited, nothing counted;
//  - otherwise the engine decides `hits` (0 counts as 1, as Envoy's
//    hits_addend; a descriptor's override may set its own) on the descriptor's counter key
//    (CounterKey) under the rule's limit: kLimited with the decision, or the engine's error;
//  - in shadow mode a denial is reported (shadow_denied) but allowed;
//  - quota mode, as envoyproxy/ratelimit has it: the request's quota-mode
//    descriptors over their limits are allowed (quota_exceeded) while at
//    least one of its quota-mode descriptors is within its own; when every
//    one of them is over, they are denied. A descriptor whose rule has
//    both modes is in shadow mode.
// Each descriptor is decided on its own: a denial of one does not undo the
// admission of another (as in envoyproxy/ratelimit); a denial consumes
// nothing, a shadow denial and a quota excess included. Each limited
// descriptor is counted by rule (PolicySet::CountRule) with its outcome.
//
// Thread safety: stateless; the Limiter is thread-safe. The scratch object
// is per caller (one per connection or worker) so that steady traffic
// allocates little.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/front_counters.h"
#include "node/engine/limiter.h"
#include "node/policy/policy.h"

namespace tally {

struct DescriptorOutcome {
  enum class Kind : uint8_t { kNoLimit, kUnlimited, kLimited };
  Kind kind = Kind::kNoLimit;
  const PolicyRule* rule = nullptr;  // kUnlimited, kLimited; owned by the PolicySet
  Status status;                     // kLimited: the engine's error, if any
  Decision decision;                 // kLimited with an OK status
  bool shadow_denied = false;        // denied, but allowed: the rule is in shadow mode
  // Over its limit, but allowed: the rule is in quota mode and another
  // quota-mode descriptor of the request is within its own.
  bool quota_exceeded = false;
  // False only for a kLimited descriptor the engine denied (or failed) that
  // neither shadow mode nor quota mode allows.
  bool allowed() const {
    return kind != Kind::kLimited || (status.ok() && decision.allowed) || shadow_denied ||
           quota_exceeded;
  }
  // Over its limit as envoyproxy/ratelimit reports a descriptor (its
  // OVER_LIMIT status): denied, or allowed only by quota mode.
  bool over_limit() const { return !allowed() || quota_exceeded; }
};

struct PolicyCheckScratch {
  std::vector<const PolicyRule*> matched;
  std::vector<std::vector<PolicySet::MatchedEntry>> paths;  // per descriptor, from Match
  std::vector<std::string> keys;
  std::vector<Limiter::CheckRequest> batch;
  std::vector<Limiter::CheckResult> results;
  std::vector<size_t> descriptor_of;  // batch index -> descriptor index
};

// One descriptor: its entries, views owned by the caller.
using DescriptorView = std::span<const DescriptorEntry>;

// What a caller may set per descriptor instead of the policy and the
// request's hits (Envoy's RateLimitOverride and per-descriptor hits_addend).
struct DescriptorOverride {
  const PolicyRule* rule = nullptr;  // used instead of the matched rule; owned by the caller
  uint64_t hits = 0;                 // 0: the request's hits
};

// InvalidArgument for a request no front may decide: an empty domain, no
// descriptors, a descriptor without entries, an entry with an empty key.
// The messages are envoyproxy/ratelimit's where it has one.
Status ValidatePolicyRequest(std::string_view domain, std::span<const DescriptorView> descriptors);

// Fills *outcomes (one per descriptor). `overrides` is empty or holds one
// entry per descriptor. The PolicySet (and any override rule) must outlive
// the use of the outcomes' rule pointers.
void CheckDescriptors(Limiter* limiter, const PolicySet& policies, std::string_view domain,
                      std::span<const DescriptorView> descriptors, uint64_t hits,
                      PolicyCheckScratch* scratch, std::vector<DescriptorOutcome>* outcomes,
                      std::span<const DescriptorOverride> overrides = {});

// What a front counts of one request's outcomes (FrontCounters): each
// kLimited descriptor is allowed (shadow denials and quota excesses too,
// counted as such as well), denied or an error; kNoLimit and kUnlimited ones
// are not checks.
FrontCounters::Outcomes CountOutcomes(std::span<const DescriptorOutcome> outcomes);

}  // namespace tally
