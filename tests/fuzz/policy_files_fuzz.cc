// Fuzzes policy files: any text as one file of envoyproxy/ratelimit's YAML
// format, parsed as tallyd parses --policy-dir (yaml-cpp and tally's rules),
// then merged into itself as --policy-merge-domains would.
#include <cstddef>
#include <cstdint>
#include <string>

#include "node/policy/policy_yaml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tally::PolicySet set;
  if (tally::ParsePolicyFile("fuzz.yaml", text, &set).ok()) {
    static_cast<void>(tally::ParsePolicyFile("again.yaml", text, &set, {.merge_domains = true}));
  }
  set.Finish();
  return 0;
}
