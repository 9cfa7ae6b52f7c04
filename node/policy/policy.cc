#include "node/policy/policy.h"

#include <algorithm>
#include <cstdio>

#include <openssl/sha.h>

#include "node/common/front_counters.h"

namespace tally {
namespace {

using MatchedEntry = PolicySet::MatchedEntry;

const PolicySet::Node* Child(const PolicySet::Node& level, const DescriptorEntry& entry,
                             MatchedEntry* matched) {
  *matched = MatchedEntry();
  const auto exact = level.by_value.find({std::string(entry.key), std::string(entry.value)});
  if (exact != level.by_value.end()) {
    matched->by_value = true;
    return matched->level = &exact->second;
  }
  for (const auto& [key, pattern] : level.wildcards) {
    if (key == entry.key && WildcardMatches(pattern, entry.value)) {
      matched->wildcard = pattern;
      return matched->level = &level.by_value.at({key, pattern});
    }
  }
  const auto any = level.by_key.find(std::string(entry.key));
  return matched->level = any == level.by_key.end() ? nullptr : &any->second;
}

void AppendEscaped(std::string_view text, std::string* out) {
  for (const char c : text) {
    if (c == '\\' || c == '|' || c == '=') out->push_back('\\');
    out->push_back(c);
  }
}

// Numbers the rules with a limit and writes a text that changes whenever
// any rule does.
void Describe(PolicySet::Node& node, uint32_t* rules, std::string* out) {
  out->append(node.value_to_metric ? "v" : "").append(node.share_threshold ? "t" : "");
  if (node.rule != nullptr) {
    PolicyRule& rule = *node.rule;
    rule.index = (*rules)++;
    out->append(rule.full_key).append(" ").append(AlgorithmName(rule.spec.algorithm));
    out->append(" ").append(std::to_string(rule.spec.limit));
    out->append("/").append(std::to_string(rule.spec.window_ms));
    out->append(rule.unlimited ? " u" : "").append(rule.shadow_mode ? " s" : "");
    out->append(rule.quota_mode ? " q" : "").append(rule.detailed_metric ? " d" : "");
    out->append(" n=").append(rule.name);
    for (const std::string& name : rule.replaces) out->append(" r=").append(name);
    out->append(" m=").append(rule.metadata_json);
  }
  out->push_back('\n');
  for (const auto& [key, pattern] : node.wildcards) out->append("* ").append(pattern).append("\n");
  for (auto& [key_value, child] : node.by_value) Describe(child, rules, out);
  for (auto& [key, child] : node.by_key) Describe(child, rules, out);
}

// Whether `rule`'s metric name carries a value of the request (so it is not
// its full_key).
bool NameVaries(const PolicyRule& rule, std::span<const MatchedEntry> path) {
  if (rule.detailed_metric || path.empty()) return true;
  return std::any_of(path.begin(), path.end(), [](const MatchedEntry& entry) {
    const bool shared = entry.level->share_threshold && !entry.wildcard.empty();
    return entry.level->value_to_metric && !entry.by_value && !shared;
  });
}

}  // namespace

Status PolicySet::AddDomain(const std::string& domain, Node root) {
  if (domains_.contains(domain)) {
    return Status::InvalidArgument("domain '" + domain + "' is defined twice");
  }
  domains_.emplace(domain, std::move(root));
  return Status::OK();
}

PolicySet::Node* PolicySet::MutableDomain(const std::string& domain) {
  const auto found = domains_.find(domain);
  return found == domains_.end() ? nullptr : &found->second;
}

void PolicySet::Finish() {
  uint32_t rules = 0;
  fingerprint_.clear();
  for (auto& [domain, root] : domains_) {
    fingerprint_.append("domain ").append(domain).append("\n");
    Describe(root, &rules, &fingerprint_);
  }
  rule_count_ = rules;
  rule_slots_ = std::make_unique<std::atomic<uint32_t>[]>(rules);
  for (uint32_t i = 0; i < rules; ++i) rule_slots_[i].store(RuleCounters::kUnassigned);
}

bool PolicySet::HasDomain(std::string_view domain) const { return domains_.contains(domain); }

void PolicySet::SetDomainSlot(const std::string& domain, size_t slot) { slots_[domain] = slot; }

size_t PolicySet::DomainSlot(std::string_view domain) const {
  const auto found = slots_.find(domain);
  return found == slots_.end() ? FrontCounters::kOtherDomain : found->second;
}

std::vector<std::string> PolicySet::DomainNames() const {
  std::vector<std::string> names;
  for (const auto& [name, root] : domains_) names.push_back(name);
  return names;
}

void PolicySet::SetRuleCounters(std::shared_ptr<RuleCounters> counters) {
  rule_counters_ = std::move(counters);
}

void PolicySet::CountRule(const PolicyRule& rule, std::string_view domain,
                          std::span<const DescriptorEntry> entries,
                          std::span<const MatchedEntry> path, RuleCounters::Outcome outcome) const {
  if (rule_counters_ == nullptr) return;
  if (rule.index >= rule_count_ || NameVaries(rule, path)) {
    rule_counters_->Count(rule_counters_->Slot(RuleMetricName(rule, domain, entries, path)),
                          outcome);
    return;
  }
  std::atomic<uint32_t>& cached = rule_slots_[rule.index];
  uint32_t slot = cached.load(std::memory_order_relaxed);
  if (slot == RuleCounters::kUnassigned) {
    slot = rule_counters_->Slot(rule.full_key);
    cached.store(slot, std::memory_order_relaxed);
  }
  rule_counters_->Count(slot, outcome);
}

const PolicyRule* PolicySet::Match(std::string_view domain,
                                   std::span<const DescriptorEntry> entries,
                                   std::vector<MatchedEntry>* path) const {
  if (path != nullptr) path->clear();
  const auto found = domains_.find(domain);
  if (found == domains_.end()) return nullptr;
  const Node* level = &found->second;
  for (size_t i = 0; i < entries.size(); ++i) {
    MatchedEntry matched;
    const Node* next = Child(*level, entries[i], &matched);
    if (next == nullptr) return nullptr;
    if (path != nullptr) path->push_back(matched);
    if (i + 1 == entries.size()) return next->rule.get();
    if (next->by_value.empty() && next->by_key.empty()) return nullptr;  // the tree ends here
    level = next;
  }
  return nullptr;
}

bool WildcardMatches(std::string_view pattern, std::string_view value) {
  const size_t first = pattern.find('*');
  if (first == std::string_view::npos) return pattern == value;
  const size_t last = pattern.rfind('*');
  const std::string_view head = pattern.substr(0, first);
  const std::string_view tail = pattern.substr(last + 1);
  if (value.size() < head.size() + tail.size() || !value.starts_with(head) ||
      !value.ends_with(tail)) {
    return false;
  }
  // The literal parts between the first and the last '*', in order, in what
  // head and tail leave.
  std::string_view rest = value.substr(head.size(), value.size() - head.size() - tail.size());
  std::string_view middle = pattern.substr(first + 1, last - first);
  while (!middle.empty()) {
    const size_t star = middle.find('*');
    const std::string_view part = middle.substr(0, star);
    const size_t at = rest.find(part);
    if (at == std::string_view::npos) return false;
    rest.remove_prefix(at + part.size());
    middle.remove_prefix(star == std::string_view::npos ? middle.size() : star + 1);
  }
  return true;
}

std::string CounterKey(std::string_view domain, std::span<const DescriptorEntry> entries,
                       std::span<const MatchedEntry> path) {
  std::string key(domain);
  for (size_t i = 0; i < entries.size(); ++i) {
    key.push_back('|');
    AppendEscaped(entries[i].key, &key);
    key.push_back('=');
    AppendEscaped(path.empty() ? entries[i].value : path[i].CountedValue(entries[i].value), &key);
  }
  if (key.size() <= kMaxKeyBytes) return key;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  std::string hashed(domain);
  hashed += "|#";
  char hex[3];
  for (const unsigned char byte : digest) {
    std::snprintf(hex, sizeof(hex), "%02x", byte);
    hashed += hex;
  }
  return hashed;
}

std::string RuleMetricName(const PolicyRule& rule, std::string_view domain,
                           std::span<const DescriptorEntry> entries,
                           std::span<const MatchedEntry> path) {
  std::string name(domain);
  for (size_t i = 0; i < entries.size(); ++i) {
    const DescriptorEntry& entry = entries[i];
    std::string_view value = entry.value;  // detailed, or a caller's override (no path)
    if (!path.empty()) {
      const MatchedEntry& matched = path[i];
      const bool shared = matched.level->share_threshold && !matched.wildcard.empty();
      if (shared) {
        value = matched.wildcard;
      } else if (!rule.detailed_metric && !matched.by_value && !matched.level->value_to_metric) {
        value = matched.wildcard;  // empty when it matched the key alone
      }
    }
    name.append(".").append(entry.key);
    if (!value.empty()) name.append("_").append(value);
  }
  return name;
}

std::vector<bool> ReplacedRules(std::span<const PolicyRule* const> matched) {
  std::vector<bool> replaced(matched.size(), false);
  for (size_t i = 0; i < matched.size(); ++i) {
    if (matched[i] == nullptr || matched[i]->name.empty()) continue;
    for (const PolicyRule* other : matched) {
      if (other == nullptr || other == matched[i]) continue;
      const auto& names = other->replaces;
      if (std::find(names.begin(), names.end(), matched[i]->name) != names.end()) {
        replaced[i] = true;
        break;
      }
    }
  }
  return replaced;
}

}  // namespace tally
