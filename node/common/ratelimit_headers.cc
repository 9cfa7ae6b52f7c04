#include "node/common/ratelimit_headers.h"

#include <charconv>
#include <initializer_list>

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

namespace {

// A number's decimal digits, on the stack.
class Digits {
 public:
  explicit Digits(uint64_t value)
      : size_(static_cast<size_t>(std::to_chars(digits_, digits_ + sizeof(digits_), value).ptr -
                                  digits_)) {}
  std::string_view view() const { return {digits_, size_}; }

 private:
  char digits_[24];
  size_t size_;
};

// Calls emit(name, value parts) for each header, in the order of the header
// comment; `policy` is already a structured-field string.
template <typename Emit>
void EmitHeaders(std::string_view policy, const Decision& decision, uint64_t window_ms, Emit emit) {
  const Digits limit(decision.limit), window(CeilSeconds(window_ms));
  const Digits remaining(decision.remaining), reset(CeilSeconds(decision.reset_after_ms));
  emit("RateLimit-Policy", {policy, ";q=", limit.view(), ";w=", window.view()});
  emit("RateLimit", {policy, ";r=", remaining.view(), ";t=", reset.view()});
  emit("X-RateLimit-Limit", {limit.view()});
  emit("X-RateLimit-Remaining", {remaining.view()});
  emit("X-RateLimit-Reset", {reset.view()});
  if (!decision.allowed && !decision.never_allowed) {
    emit("Retry-After", {Digits(CeilSeconds(decision.retry_after_ms)).view()});
  }
}

}  // namespace

void AppendRateLimitHeaders(std::string_view policy, const Decision& decision, uint64_t window_ms,
                            std::vector<HeaderField>* headers) {
  EmitHeaders(StructuredString(policy), decision, window_ms,
              [headers](std::string_view name, std::initializer_list<std::string_view> parts) {
                HeaderField& field = headers->emplace_back();
                field.name = name;
                for (const std::string_view part : parts) field.value += part;
              });
}

void AppendRateLimitHeaderLines(std::string_view policy, const Decision& decision,
                                uint64_t window_ms, std::string* lines) {
  EmitHeaders(StructuredString(policy), decision, window_ms,
              [lines](std::string_view name, std::initializer_list<std::string_view> parts) {
                *lines += name;
                *lines += ": ";
                for (const std::string_view part : parts) *lines += part;
                *lines += "\r\n";
              });
}

}  // namespace tally
