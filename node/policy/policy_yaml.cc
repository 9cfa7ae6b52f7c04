#include "node/policy/policy_yaml.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
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
  std::string lower = unit;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "second") return 1'000;
  if (lower == "minute") return 60'000;
  if (lower == "hour") return 3'600'000;
  if (lower == "day") return 86'400'000;
  return std::nullopt;
}

std::unique_ptr<PolicyRule> ParseRateLimit(const YAML::Node& node, const std::string& full_key,
                                           bool shadow_mode) {
  RequireMap(
      node, "rate_limit",
      {"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "window_ms"});
  auto rule = std::make_unique<PolicyRule>();
  rule->full_key = full_key;
  rule->shadow_mode = shadow_mode;
  rule->spec.algorithm = Algorithm::kFixedWindow;
  if (node["name"]) rule->name = String(node["name"], "name");
  if (node["unlimited"]) rule->unlimited = Bool(node["unlimited"], "unlimited");
  if (const YAML::Node replaces = node["replaces"]) {
    if (!replaces.IsSequence()) Fail(replaces, "replaces must be a list of {name: ...}");
    for (const YAML::Node& entry : replaces) {
      RequireMap(entry, "a replaces entry", {"name"});
      const std::string name = entry["name"] ? String(entry["name"], "name") : "";
      if (name.empty()) Fail(entry, "a replaces entry needs a name");
      if (name == rule->name) Fail(entry, "a limit cannot replace itself ('" + name + "')");
      rule->replaces.push_back(name);
    }
  }
  const YAML::Node unit = node["unit"];
  const YAML::Node window_ms = node["window_ms"];
  if (rule->unlimited) {
    if (unit || window_ms || node["requests_per_unit"]) {
      Fail(node, "an unlimited rate_limit takes no unit, window_ms or requests_per_unit");
    }
    return rule;
  }
  if (unit && window_ms) Fail(window_ms, "give either unit or window_ms, not both");
  if (unit) {
    const std::optional<uint64_t> ms = UnitMs(String(unit, "unit"));
    if (!ms) {
      Fail(unit, "unit '" + unit.Scalar() + "' is not one of second, minute, hour, day" +
                     " (tally's windows are at most 30 days)");
    }
    rule->spec.window_ms = *ms;
  } else if (window_ms) {
    rule->spec.window_ms = Unsigned(window_ms, "window_ms", kMaxWindowMs);
    if (rule->spec.window_ms == 0) Fail(window_ms, "window_ms must be at least 1");
  } else {
    Fail(node, "rate_limit needs a unit (or window_ms), or unlimited: true");
  }
  if (!node["requests_per_unit"]) Fail(node, "rate_limit needs requests_per_unit");
  rule->spec.limit = Unsigned(node["requests_per_unit"], "requests_per_unit", kMaxLimit);
  if (const YAML::Node algorithm = node["algorithm"]) {
    const std::optional<Algorithm> parsed = ParseAlgorithm(String(algorithm, "algorithm"));
    if (!parsed) {
      Fail(algorithm, "unknown algorithm '" + algorithm.Scalar() +
                          "' (fixed_window, sliding_counter, sliding_log, token_bucket)");
    }
    rule->spec.algorithm = *parsed;
  }
  return rule;
}

void ParseDescriptors(const YAML::Node& list, const std::string& parent_key, bool shadow_mode,
                      PolicySet::Node* level) {
  if (!list.IsSequence()) Fail(list, "descriptors must be a list");
  for (const YAML::Node& item : list) {
    RequireMap(item, "a descriptor",
               {"key", "value", "rate_limit", "shadow_mode", "detailed_metric", "descriptors"});
    const std::string key = item["key"] ? String(item["key"], "key") : "";
    if (key.empty()) Fail(item, "a descriptor needs a non-empty key");
    const std::string value = item["value"] ? String(item["value"], "value") : "";
    if (item["detailed_metric"]) Bool(item["detailed_metric"], "detailed_metric");
    const bool shadow =
        shadow_mode || (item["shadow_mode"] && Bool(item["shadow_mode"], "shadow_mode"));
    const std::string full_key = parent_key + key + (value.empty() ? "" : "_" + value);

    PolicySet::Node* child = nullptr;
    if (value.empty()) {
      if (level->by_key.contains(key)) Fail(item, "duplicate descriptor '" + full_key + "'");
      child = &level->by_key[key];
    } else {
      if (level->by_value.contains({key, value}))
        Fail(item, "duplicate descriptor '" + full_key + "'");
      child = &level->by_value[{key, value}];
      if (value.back() == '*') level->wildcards.emplace_back(key, value);
    }
    if (item["rate_limit"]) child->rule = ParseRateLimit(item["rate_limit"], full_key, shadow);
    if (item["descriptors"]) ParseDescriptors(item["descriptors"], full_key + ".", shadow, child);
  }
}

}  // namespace

Status ParsePolicyFile(std::string_view file, const std::string& text, PolicySet* set) {
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
    PolicySet::Node tree;
    if (root["descriptors"]) ParseDescriptors(root["descriptors"], domain + ".", shadow, &tree);
    if (Status added = set->AddDomain(domain, std::move(tree)); !added.ok()) {
      return error(root["domain"].Mark().line + 1, std::string(added.message()));
    }
    return Status::OK();
  } catch (const PolicyError& e) {
    return error(e.line, e.reason);
  } catch (const YAML::Exception& e) {
    return error(e.mark.is_null() ? 0 : e.mark.line + 1, e.msg);
  }
}

Status LoadPolicyDir(const std::string& dir, PolicySet* set) {
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
    if (Status parsed = ParsePolicyFile(path.string(), text.str(), set); !parsed.ok())
      return parsed;
  }
  return Status::OK();
}

}  // namespace tally
