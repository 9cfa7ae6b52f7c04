#include "node/policy/policy.h"

#include <algorithm>
#include <cstdio>

#include <openssl/sha.h>

#include "node/common/front_counters.h"

namespace tally {
namespace {

const PolicySet::Node* Child(const PolicySet::Node& level, const DescriptorEntry& entry) {
  const auto exact = level.by_value.find({std::string(entry.key), std::string(entry.value)});
  if (exact != level.by_value.end()) return &exact->second;
  for (const auto& [key, pattern] : level.wildcards) {
    const std::string_view prefix = std::string_view(pattern).substr(0, pattern.size() - 1);
    if (key == entry.key && entry.value.starts_with(prefix)) {
      return &level.by_value.at({key, pattern});
    }
  }
  const auto any = level.by_key.find(std::string(entry.key));
  return any == level.by_key.end() ? nullptr : &any->second;
}

void AppendEscaped(std::string_view text, std::string* out) {
  for (const char c : text) {
    if (c == '\\' || c == '|' || c == '=') out->push_back('\\');
    out->push_back(c);
  }
}

// Rules with a limit, and a text that changes whenever any rule does.
void Describe(const PolicySet::Node& node, size_t* rules, std::string* out) {
  if (node.rule != nullptr) {
    const PolicyRule& rule = *node.rule;
    ++*rules;
    out->append(rule.full_key).append(" ").append(AlgorithmName(rule.spec.algorithm));
    out->append(" ").append(std::to_string(rule.spec.limit));
    out->append("/").append(std::to_string(rule.spec.window_ms));
    out->append(rule.unlimited ? " u" : "").append(rule.shadow_mode ? " s" : "");
    out->append(" n=").append(rule.name);
    for (const std::string& name : rule.replaces) out->append(" r=").append(name);
    out->push_back('\n');
  }
  for (const auto& [key_value, child] : node.by_value) Describe(child, rules, out);
  for (const auto& [key, child] : node.by_key) Describe(child, rules, out);
}

}  // namespace

Status PolicySet::AddDomain(const std::string& domain, Node root) {
  if (domains_.contains(domain)) {
    return Status::InvalidArgument("domain '" + domain + "' is defined twice");
  }
  std::string description = "domain " + domain + "\n";
  Describe(root, &rule_count_, &description);
  fingerprint_ += description;
  domains_.emplace(domain, std::move(root));
  return Status::OK();
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

const PolicyRule* PolicySet::Match(std::string_view domain,
                                   std::span<const DescriptorEntry> entries) const {
  const auto found = domains_.find(domain);
  if (found == domains_.end()) return nullptr;
  const Node* level = &found->second;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Node* next = Child(*level, entries[i]);
    if (next == nullptr) return nullptr;
    if (i + 1 == entries.size()) return next->rule.get();
    if (next->by_value.empty() && next->by_key.empty()) return nullptr;  // the tree ends here
    level = next;
  }
  return nullptr;
}

std::string CounterKey(std::string_view domain, std::span<const DescriptorEntry> entries) {
  std::string key(domain);
  for (const DescriptorEntry& entry : entries) {
    key.push_back('|');
    AppendEscaped(entry.key, &key);
    key.push_back('=');
    AppendEscaped(entry.value, &key);
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
