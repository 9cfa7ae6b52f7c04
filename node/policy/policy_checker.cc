#include "node/policy/policy_checker.h"

namespace tally {

void CheckDescriptors(Limiter* limiter, const PolicySet& policies, std::string_view domain,
                      std::span<const DescriptorView> descriptors, uint64_t hits,
                      PolicyCheckScratch* scratch, std::vector<DescriptorOutcome>* outcomes) {
  const uint64_t cost = hits == 0 ? 1 : hits;
  const size_t count = descriptors.size();
  scratch->matched.resize(count);
  for (size_t i = 0; i < count; ++i) scratch->matched[i] = policies.Match(domain, descriptors[i]);
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
    scratch->keys.push_back(CounterKey(domain, descriptors[i]));
    scratch->descriptor_of.push_back(i);
  }

  const size_t checks = scratch->keys.size();
  scratch->batch.resize(checks);
  scratch->results.resize(checks);
  for (size_t j = 0; j < checks; ++j) {
    const PolicyRule& rule = *(*outcomes)[scratch->descriptor_of[j]].rule;
    scratch->batch[j] = Limiter::CheckRequest{scratch->keys[j], rule.spec, cost};
  }
  limiter->CheckBatch(scratch->batch, scratch->results);
  for (size_t j = 0; j < checks; ++j) {
    DescriptorOutcome& outcome = (*outcomes)[scratch->descriptor_of[j]];
    outcome.status = scratch->results[j].status;
    outcome.decision = scratch->results[j].decision;
    outcome.shadow_denied =
        outcome.status.ok() && !outcome.decision.allowed && outcome.rule->shadow_mode;
  }
}

}  // namespace tally
