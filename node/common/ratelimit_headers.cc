#include "node/common/ratelimit_headers.h"

namespace tally {

uint64_t CeilSeconds(uint64_t ms) { return ms / 1'000 + (ms % 1'000 != 0 ? 1 : 0); }

std::string StructuredString(std::string_view policy) {
  std::string out = "\"";
  for (const char c : policy) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c >= 0x20 && c <= 0x7e ? c : '?');
  }
  out.push_back('"');
  return out;
}

void AppendRateLimitHeaders(std::string_view policy, const Decision& decision, uint64_t window_ms,
                            std::vector<HeaderField>* headers) {
  const std::string name = StructuredString(policy);
  const std::string reset = std::to_string(CeilSeconds(decision.reset_after_ms));
  headers->push_back({"RateLimit-Policy", name + ";q=" + std::to_string(decision.limit) +
                                              ";w=" + std::to_string(CeilSeconds(window_ms))});
  headers->push_back(
      {"RateLimit", name + ";r=" + std::to_string(decision.remaining) + ";t=" + reset});
  headers->push_back({"X-RateLimit-Limit", std::to_string(decision.limit)});
  headers->push_back({"X-RateLimit-Remaining", std::to_string(decision.remaining)});
  headers->push_back({"X-RateLimit-Reset", reset});
  if (!decision.allowed && !decision.never_allowed) {
    headers->push_back({"Retry-After", std::to_string(CeilSeconds(decision.retry_after_ms))});
  }
}

}  // namespace tally
