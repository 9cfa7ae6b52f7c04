#include "node/policy/policy_checker.h"

namespace tally {
namespace {

// Quota-mode descriptors over their limits are allowed unless every
// quota-mode descriptor of the request is.
void ApplyQuotaMode(std::vector<DescriptorOutcome>* outcomes) {
  size_t quota = 0, over = 0;
  const auto over_quota = [](const DescriptorOutcome& outcome) {
    return !outcome.decision.allowed && !outcome.shadow_denied;
  };
  for (const DescriptorOutcome& outcome : *outcomes) {
    if (outcome.kind != DescriptorOutcome::Kind::kLimited || !outcome.status.ok() ||
        !outcome.rule->quota_mode) {
      continue;
    }
    ++quota;
    over += over_quota(outcome) ? 1 : 0;
  }
  if (over == 0 || over == quota) return;
  for (DescriptorOutcome& outcome : *outcomes) {
    outcome.quota_exceeded = outcome.kind == DescriptorOutcome::Kind::kLimited &&
                             outcome.status.ok() && outcome.rule->quota_mode && over_quota(outcome);
  }
}

RuleCounters::Outcome RuleOutcome(const DescriptorOutcome& outcome) {
  if (!outcome.status.ok()) return RuleCounters::Outcome::kError;
  if (outcome.shadow_denied) return RuleCounters::Outcome::kShadowDenied;
  if (outcome.quota_exceeded) return RuleCounters::Outcome::kQuotaExceeded;
  return outcome.allowed() ? RuleCounters::Outcome::kAllowed : RuleCounters::Outcome::kDenied;
}

}  // namespace

Status ValidatePolicyRequest(std::string_view domain, std::span<const DescriptorView> descriptors) {
  if (domain.empty()) return Status::InvalidArgument("rate limit domain must not be empty");
  if (descriptors.empty()) {
    return Status::InvalidArgument("rate limit descriptor list must not be empty");
  }
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const std::string which = "descriptor " + std::to_string(i);
    if (descriptors[i].empty()) return Status::InvalidArgument(which + " has no entries");
    for (const DescriptorEntry& entry : descriptors[i]) {
      if (entry.key.empty())
        return Status::InvalidArgument(which + " has an entry with an empty key");
    }
  }
  return Status::OK();
}

void CheckDescriptors(Limiter* limiter, const PolicySet& policies, std::string_view domain,
                      std::span<const DescriptorView> descriptors, uint64_t hits,
                      PolicyCheckScratch* scratch, std::vector<DescriptorOutcome>* outcomes,
                      std::span<const DescriptorOverride> overrides) {
  const size_t count = descriptors.size();
  const auto override_of = [&](size_t i) {
    return overrides.empty() ? DescriptorOverride() : overrides[i];
  };
  scratch->matched.resize(count);
  scratch->paths.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const PolicyRule* rule = override_of(i).rule;
    scratch->paths[i].clear();
    scratch->matched[i] =
        rule != nullptr ? rule : policies.Match(domain, descriptors[i], &scratch->paths[i]);
  }
  const std::vector<bool> replaced = ReplacedRules(scratch->matched);

  outcomes->assign(count, DescriptorOutcome());
  scratch->keys.clear();
  scratch->descriptor_of.clear();
  for (size_t i = 0; i < count; ++i) {
    const PolicyRule* rule = scratch->matched[i];
    DescriptorOutcome& outcome = (*outcomes)[i];
    if (rule == nullptr || replaced[i]) continue;
    outcome.rule = rule;
    if (rule->unlimited) {
      outcome.kind = DescriptorOutcome::Kind::kUnlimited;
      continue;
    }
    outcome.kind = DescriptorOutcome::Kind::kLimited;
    scratch->keys.push_back(CounterKey(domain, descriptors[i], scratch->paths[i]));
    scratch->descriptor_of.push_back(i);
  }

  const size_t checks = scratch->keys.size();
  scratch->batch.resize(checks);
  scratch->results.resize(checks);
  for (size_t j = 0; j < checks; ++j) {
    const size_t i = scratch->descriptor_of[j];
    const uint64_t own_hits = override_of(i).hits != 0 ? override_of(i).hits : hits;
    scratch->batch[j] = Limiter::CheckRequest{scratch->keys[j], (*outcomes)[i].rule->spec,
                                              own_hits == 0 ? 1 : own_hits};
  }
  limiter->CheckBatch(scratch->batch, scratch->results);
  for (size_t j = 0; j < checks; ++j) {
    DescriptorOutcome& outcome = (*outcomes)[scratch->descriptor_of[j]];
    outcome.status = scratch->results[j].status;
    outcome.decision = scratch->results[j].decision;
    outcome.shadow_denied =
        outcome.status.ok() && !outcome.decision.allowed && outcome.rule->shadow_mode;
  }
  ApplyQuotaMode(outcomes);
  for (size_t i = 0; i < count; ++i) {
    const DescriptorOutcome& outcome = (*outcomes)[i];
    if (outcome.kind != DescriptorOutcome::Kind::kLimited) continue;
    policies.CountRule(*outcome.rule, domain, descriptors[i], scratch->paths[i],
                       RuleOutcome(outcome));
  }
}

FrontCounters::Outcomes CountOutcomes(std::span<const DescriptorOutcome> outcomes) {
  FrontCounters::Outcomes counted;
  for (const DescriptorOutcome& outcome : outcomes) {
    if (outcome.kind != DescriptorOutcome::Kind::kLimited) continue;
    if (!outcome.status.ok()) {
      ++counted.errors;
    } else if (outcome.allowed()) {
      ++counted.allowed;
      counted.shadow_denied += outcome.shadow_denied ? 1 : 0;
      counted.quota_exceeded += outcome.quota_exceeded ? 1 : 0;
    } else {
      ++counted.denied;
    }
  }
  return counted;
}

}  // namespace tally
