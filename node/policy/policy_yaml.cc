#include "node/policy/policy_yaml.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace tally {
namespace {

// A parse error at a node; carried by exception inside this file only.
struct PolicyError {
  int line;  // 1-based; 0 when unknown
  std::string reason;
};

[[noreturn]] void Fail(const YAML::Node& node, std::string reason) {
  throw PolicyError{node.Mark().is_null() ? 0 : node.Mark().line + 1, std::move(reason)};
}

void RequireMap(const YAML::Node& node, const char* what, std::initializer_list<const char*> keys) {
  if (!node.IsMap()) Fail(node, std::string(what) + " must be a mapping");
  for (const auto& item : node) {
    const std::string key = item.first.Scalar();
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; })) {
      Fail(item.first, "unknown key '" + key + "' in " + what);
    }
  }
}

std::string String(const YAML::Node& node, const char* what) {
  if (!node.IsScalar()) Fail(node, std::string(what) + " must be a string");
  return node.Scalar();
}

bool Bool(const YAML::Node& node, const char* what) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    Fail(node, std::string(what) + " must be true or false");
  }
  return value;
}

uint64_t Unsigned(const YAML::Node& node, const char* what, uint64_t max) {
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  if (text.empty() || !std::all_of(text.begin(), text.end(), ::isdigit) || text.size() > 19) {
    Fail(node, std::string(what) + " must be a whole number");
  }
  const uint64_t value = std::stoull(text);
  if (value > max) Fail(node, std::string(what) + " " + text + " is over " + std::to_string(max));
  return value;
}

std::optional<uint64_t> UnitMs(const std::string& unit) {
  constexpr uint64_t kDayMs = 86'400'000;
  std::string lower = unit;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "second") return 1'000;
  if (lower == "minute") return 60'000;
  if (lower == "hour") return 3'600'000;
  if (lower == "day") return kDayMs;
  if (lower == "week") return 7 * kDayMs;
  if (lower == "month") return 30 * kDayMs;
  if (lower == "year") return 365 * kDayMs;
  return std::nullopt;
}

// A plain scalar as YAML 1.1 types it (as envoyproxy/ratelimit's YAML
// library does); quoted or tagged !!str, a string.
Metadata ScalarMetadata(const YAML::Node& node) {
  Metadata value;
  const std::string& text = node.Scalar();
  if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") {
    value.kind = Metadata::Kind::kString;
    value.text = text;
    return value;
  }
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    return value;
  }
  if (YAML::convert<bool>::decode(node, value.boolean)) {
    value.kind = Metadata::Kind::kBool;
    return value;
  }
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const bool numeric = std::all_of(text.begin(), text.end(), [&](char c) {
    return digit(c) || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
  });
  const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
  const char* end = text.data() + text.size();
  if (numeric && std::any_of(text.begin(), text.end(), digit)) {
    const auto [at, error] = std::from_chars(begin, end, value.number);
    if (error == std::errc() && at == end) {
      value.kind = Metadata::Kind::kNumber;
      return value;
    }
  }
  value.kind = Metadata::Kind::kString;
  value.text = text;
  return value;
}

Metadata MetadataOf(const YAML::Node& node) {
  Metadata value;
  if (node.IsScalar()) return ScalarMetadata(node);
  if (node.IsSequence()) {
    value.kind = Metadata::Kind::kList;
    for (const YAML::Node& item : node) value.items.push_back(MetadataOf(item));
  } else if (node.IsMap()) {
    value.kind = Metadata::Kind::kMap;
    for (const auto& item : node) {
      if (!item.first.IsScalar()) Fail(item.first, "metadata keys must be scalars");
      std::string name = item.first.Scalar();
      if (value.Find(name) != nullptr)
        Fail(item.first, "metadata key '" + name + "' is given twice");
      value.fields.emplace_back(std::move(name), MetadataOf(item.second));
    }
  }
  return value;
}

void ParseUnit(const YAML::Node& node, PolicyRule* rule) {
  const YAML::Node unit = node["unit"];
  const YAML::Node window_ms = node["window_ms"];
  if (unit && window_ms) Fail(window_ms, "give either unit or window_ms, not both");
  if (unit) {
    const std::optional<uint64_t> ms = UnitMs(String(unit, "unit"));
    if (!ms) {
      Fail(unit, "unit '" + unit.Scalar() +
                     "' is not one of second, minute, hour, day, week, month, year");
    }
    rule->spec.window_ms = *ms;
  } else if (window_ms) {
    rule->spec.window_ms = Unsigned(window_ms, "window_ms", kMaxWindowMs);
    if (rule->spec.window_ms == 0) Fail(window_ms, "window_ms must be at least 1");
  } else {
    Fail(node, "rate_limit needs a unit (or window_ms), or unlimited: true");
  }
}

// The descriptor's own limit; its shadow_mode and quota_mode are the
// descriptor's (or the whole domain's shadow_mode).
std::unique_ptr<PolicyRule> ParseRateLimit(const YAML::Node& node, const std::string& full_key,
                                           const YAML::Node& descriptor, bool domain_shadow) {
  RequireMap(
      node, "rate_limit",
      {"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "window_ms"});
  auto rule = std::make_unique<PolicyRule>();
  rule->full_key = full_key;
  const auto flag = [&](const char* key) { return descriptor[key] && Bool(descriptor[key], key); };
  rule->shadow_mode = domain_shadow || flag("shadow_mode");
  rule->quota_mode = flag("quota_mode");
  rule->detailed_metric = flag("detailed_metric");
  rule->spec.algorithm = Algorithm::kFixedWindow;
  if (node["name"]) rule->name = String(node["name"], "name");
  if (node["unlimited"]) rule->unlimited = Bool(node["unlimited"], "unlimited");
  if (const YAML::Node replaces = node["replaces"]) {
    if (!replaces.IsSequence()) Fail(replaces, "replaces must be a list of {name: ...}");
    for (const YAML::Node& entry : replaces) {
      RequireMap(entry, "a replaces entry", {"name"});
      const YAML::Node given = entry["name"];
      const std::string name = given && !given.IsNull() ? String(given, "name") : "";
      if (name.empty()) Fail(entry, "a replaces entry needs a name");
      if (name == rule->name) Fail(entry, "a limit cannot replace itself ('" + name + "')");
      rule->replaces.push_back(name);
    }
  }
  if (rule->unlimited) {
    // requests_per_unit means nothing here, but envoyproxy/ratelimit loads it.
    if (node["unit"] || node["window_ms"]) {
      Fail(node, "an unlimited rate_limit takes no unit or window_ms");
    }
    if (node["requests_per_unit"])
      Unsigned(node["requests_per_unit"], "requests_per_unit", kMaxLimit);
    return rule;
  }
  ParseUnit(node, rule.get());
  if (const YAML::Node algorithm = node["algorithm"]) {
    const std::optional<Algorithm> parsed = ParseAlgorithm(String(algorithm, "algorithm"));
    if (!parsed) {
      Fail(algorithm, "unknown algorithm '" + algorithm.Scalar() +
                          "' (fixed_window, sliding_counter, sliding_log, token_bucket)");
    }
    rule->spec.algorithm = *parsed;
  }
  const YAML::Node requests = node["requests_per_unit"];
  if (!requests) Fail(node, "rate_limit needs requests_per_unit");
  rule->spec.limit = Unsigned(requests, "requests_per_unit", kMaxLimit);
  if (const uint64_t max = MaxLimitFor(rule->spec.window_ms); rule->spec.limit > max) {
    Fail(requests, "requests_per_unit " + requests.Scalar() + " is over " + std::to_string(max) +
                       ", the most a window of " + std::to_string(rule->spec.window_ms) +
                       " ms takes");
  }
  return rule;
}

// `taken`: another file's level of the same domain, whose entries this
// file's may not repeat (merge_domains); null otherwise.
void ParseDescriptors(const YAML::Node& list, const std::string& parent_key, bool domain_shadow,
                      PolicySet::Node* level, const PolicySet::Node* taken = nullptr) {
  if (!list.IsSequence()) Fail(list, "descriptors must be a list");
  for (const YAML::Node& item : list) {
    RequireMap(item, "a descriptor",
               {"key", "value", "rate_limit", "shadow_mode", "quota_mode", "detailed_metric",
                "value_to_metric", "share_threshold", "metadata", "descriptors"});
    const std::string key = item["key"] ? String(item["key"], "key") : "";
    if (key.empty()) Fail(item, "a descriptor needs a non-empty key");
    const std::string value = item["value"] ? String(item["value"], "value") : "";
    for (const char* flag : {"shadow_mode", "quota_mode", "detailed_metric"}) {
      if (item[flag]) Bool(item[flag], flag);
    }
    const std::string full_key = parent_key + key + (value.empty() ? "" : "_" + value);

    PolicySet::Node* child = nullptr;
    const bool duplicate =
        value.empty() ? level->by_key.contains(key) || (taken && taken->by_key.contains(key))
                      : level->by_value.contains({key, value}) ||
                            (taken && taken->by_value.contains({key, value}));
    if (duplicate) Fail(item, "duplicate descriptor '" + full_key + "'");
    if (value.empty()) {
      child = &level->by_key[key];
    } else {
      child = &level->by_value[{key, value}];
      if (value.find('*') != std::string::npos) level->wildcards.emplace_back(key, value);
    }
    child->value_to_metric =
        item["value_to_metric"] && Bool(item["value_to_metric"], "value_to_metric");
    child->share_threshold =
        item["share_threshold"] && Bool(item["share_threshold"], "share_threshold");
    if (child->share_threshold && value.find('*') == std::string::npos) {
      Fail(item["share_threshold"],
           "share_threshold needs a wildcard value (with '*'), and '" + full_key + "' has none");
    }
    std::shared_ptr<const Metadata> metadata;  // the limit's; without one, read and dropped
    if (const YAML::Node given = item["metadata"]; given && !given.IsNull()) {
      if (!given.IsMap()) Fail(given, "metadata must be a mapping");
      metadata = std::make_shared<const Metadata>(MetadataOf(given));
    }
    if (item["rate_limit"]) {
      child->rule = ParseRateLimit(item["rate_limit"], full_key, item, domain_shadow);
      if (metadata != nullptr) {
        child->rule->metadata_json = MetadataJson(*metadata);
        child->rule->metadata = std::move(metadata);
      }
    }
    if (item["descriptors"]) {
      ParseDescriptors(item["descriptors"], full_key + ".", domain_shadow, child);
    }
  }
}

// Moves the top level of `from` (parsed against `into`, so without a
// duplicate) into `into`.
void MergeTopLevel(PolicySet::Node from, PolicySet::Node* into) {
  for (auto& [key_value, child] : from.by_value)
    into->by_value.emplace(key_value, std::move(child));
  for (auto& [key, child] : from.by_key) into->by_key.emplace(key, std::move(child));
  into->wildcards.insert(into->wildcards.end(), from.wildcards.begin(), from.wildcards.end());
}

}  // namespace

Status ParsePolicyFile(std::string_view file, const std::string& text, PolicySet* set,
                       const PolicyLoadOptions& options) {
  const auto error = [&](int line, const std::string& reason) {
    std::string where(file);
    if (line > 0) where.append(":").append(std::to_string(line));
    return Status::InvalidArgument(where.append(": ").append(reason));
  };
  try {
    const YAML::Node root = YAML::Load(text);
    RequireMap(root, "a policy file", {"domain", "descriptors", "shadow_mode"});
    const std::string domain = root["domain"] ? String(root["domain"], "domain") : "";
    if (domain.empty()) Fail(root, "a policy file needs a non-empty domain");
    if (domain.size() > kMaxDomainBytes) {
      Fail(root["domain"], "domain is over " + std::to_string(kMaxDomainBytes) + " bytes");
    }
    const bool shadow = root["shadow_mode"] && Bool(root["shadow_mode"], "shadow_mode");
    PolicySet::Node* merged = options.merge_domains ? set->MutableDomain(domain) : nullptr;
    PolicySet::Node tree;
    if (root["descriptors"]) {
      ParseDescriptors(root["descriptors"], domain + ".", shadow, &tree, merged);
    }
    if (merged != nullptr) {
      MergeTopLevel(std::move(tree), merged);
    } else if (Status added = set->AddDomain(domain, std::move(tree)); !added.ok()) {
      return error(root["domain"].Mark().line + 1, std::string(added.message()));
    }
    return Status::OK();
  } catch (const PolicyError& e) {
    return error(e.line, e.reason);
  } catch (const YAML::Exception& e) {
    return error(e.mark.is_null() ? 0 : e.mark.line + 1, e.msg);
  }
}

Status LoadPolicyDir(const std::string& dir, PolicySet* set, const PolicyLoadOptions& options) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string extension = entry.path().extension().string();
    if (entry.is_regular_file() && (extension == ".yaml" || extension == ".yml")) {
      files.push_back(entry.path());
    }
  }
  if (ec) return Status::IOError("cannot read policy directory " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  for (const std::filesystem::path& path : files) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return Status::IOError("cannot read policy file " + path.string());
    if (Status parsed = ParsePolicyFile(path.string(), text.str(), set, options); !parsed.ok()) {
      return parsed;
    }
  }
  set->Finish();
  return Status::OK();
}

}  // namespace tally
