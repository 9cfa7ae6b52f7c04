#include "node/common/limit.h"

#include <array>
#include <string>

namespace tally {
namespace {

constexpr std::array<std::string_view, kAlgorithmCount> kNames = {
    "fixed_window", "sliding_log", "sliding_counter", "token_bucket"};

}  // namespace

Status ValidateSpec(const LimitSpec& spec) {
  if (static_cast<unsigned>(spec.algorithm) >= kAlgorithmCount) {
    return Status::InvalidArgument("unknown algorithm " +
                                   std::to_string(static_cast<unsigned>(spec.algorithm)));
  }
  if (spec.window_ms == 0) return Status::InvalidArgument("window_ms must be at least 1");
  if (spec.window_ms > kMaxWindowMs) {
    return Status::InvalidArgument("window_ms " + std::to_string(spec.window_ms) +
                                   " exceeds the maximum of " + std::to_string(kMaxWindowMs) +
                                   " (365 days)");
  }
  if (const uint64_t max = MaxLimitFor(spec.window_ms); spec.limit > max) {
    return Status::InvalidArgument(
        "limit " + std::to_string(spec.limit) + " exceeds the maximum of " + std::to_string(max) +
        (max < kMaxLimit ? " for window_ms " + std::to_string(spec.window_ms) : std::string()));
  }
  return Status::OK();
}

Status ValidateKey(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("key is empty");
  if (key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key is " + std::to_string(key.size()) +
                                   " bytes; the maximum is " + std::to_string(kMaxKeyBytes));
  }
  return Status::OK();
}

std::string_view AlgorithmName(Algorithm algorithm) {
  const auto index = static_cast<size_t>(algorithm);
  return index < kNames.size() ? kNames[index] : std::string_view("unknown");
}

std::optional<Algorithm> ParseAlgorithm(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<Algorithm>(i);
  }
  return std::nullopt;
}

}  // namespace tally
