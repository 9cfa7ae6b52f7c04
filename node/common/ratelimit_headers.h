// The response headers that tell a client about its limit, from one
// decision: what the seed asks for (X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset, Retry-After on a denial) and the IETF httpapi
// RateLimit header fields (draft-ietf-httpapi-ratelimit-headers, structured
// fields):
//   RateLimit-Policy: "<policy>";q=<limit>;w=<window seconds>
//   RateLimit: "<policy>";r=<remaining>;t=<seconds until the full limit is back>
// Times are whole seconds rounded up (a client that waits that long is
// never early). Every front that speaks HTTP semantics (Envoy's
// response_headers_to_add, the HTTP front) uses these, so they agree.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/limit.h"

namespace tally {

struct HeaderField {
  std::string name;
  std::string value;
  bool operator==(const HeaderField&) const = default;
};

// ms as whole seconds, rounded up.
uint64_t CeilSeconds(uint64_t ms);

// `policy` as a structured-field string: quoted, '"' and '\' escaped, any
// byte outside printable ASCII replaced by '?'.
std::string StructuredString(std::string_view policy);

// Appends the headers above for `decision` under a limit of `window_ms`;
// Retry-After only when the decision is a denial that a wait can fix.
void AppendRateLimitHeaders(std::string_view policy, const Decision& decision, uint64_t window_ms,
                            std::vector<HeaderField>* headers);
// The same headers as HTTP/1.1 header lines ("Name: value\r\n") appended to
// *lines: for a front that writes them on every request, with no allocation
// but the string's growth.
void AppendRateLimitHeaderLines(std::string_view policy, const Decision& decision,
                                uint64_t window_ms, std::string* lines);

}  // namespace tally
