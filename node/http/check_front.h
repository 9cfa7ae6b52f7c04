// CheckFront: rate-limit checks over HTTP (tallyd --http-port), on the
// Server's workers (node/http/http_front.h does the HTTP).
//
// Endpoints (README "The HTTP front" has examples):
//   POST /v1/policy  {"domain": d, "descriptors": [{"entries": [{"key": k, "value": v}, ...],
//                     "hits_addend": n?}, ...], "hits_addend": n?}
//   GET  /v1/policy?domain=d&k1=v1&k2=v2[&hits_addend=n]   one descriptor, entries in order
//   GET  /v1/auth?domain=d&k1=v1...   as GET /v1/policy, but a denial is 403 (for nginx's
//                                     auth_request, which knows only 2xx, 401 and 403); any method
//   POST /v1/check   {"key": k, "algorithm": a?, "limit": l, "window_ms": w, "cost": c?}
//   GET  /v1/check?key=k&algorithm=a&limit=l&window_ms=w&cost=c
// A check by policy is decided by CheckDescriptors (node/policy/policy_checker.h):
// every descriptor is checked, the request is denied when any is. The
// algorithm defaults to sliding_counter, cost and hits_addend to 1.
//
// Answers: 200 allowed; 429 denied; 403 denied when no wait helps (cost over
// the limit, a limit of 0) and, on /v1/auth, for every denial. Allowed and
// denied answers carry RateLimit-Policy, RateLimit, X-RateLimit-Limit,
// X-RateLimit-Remaining, X-RateLimit-Reset (node/common/ratelimit_headers.h;
// of the denied descriptor with the longest wait, else of the one with the
// least remaining) and Retry-After on a denial a wait fixes; a JSON body
// with the whole decision, each descriptor with its rule's metadata (as
// JSON) when the policy gives some. A policy in shadow mode answers 200 and
// says "shadow_denied": true in the body and `Tally-Shadow-Denied: 1`; a
// quota-mode descriptor over its limit that quota mode lets pass says
// "quota_exceeded": true and `Tally-Quota-Exceeded: 1`.
// Errors, with {"error": "..."}: 400 for invalid JSON, a missing or
// malformed field, an unknown domain, an invalid key or limit; 404 for an
// unknown path; 405 for a method a path does not take (with Allow); 503
// when a new key would pass --max-keys (checks on held keys go on).
//
// Thread safety: NewHandler from any worker; a handler belongs to one
// connection's worker. Counters are per worker (written by that worker,
// relaxed atomics read by any thread in stats()).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "node/common/front_counters.h"
#include "node/engine/limiter.h"
#include "node/http/http_front.h"
#include "node/policy/policy_store.h"

namespace tally {

class CheckFront : public HttpFront {
 public:
  struct Stats {
    uint64_t requests = 0;       // every request answered, refusals included
    uint64_t allowed = 0;        // 200 with a decision
    uint64_t denied = 0;         // 429, and 403 for a denial
    uint64_t refused = 0;        // errors: 4xx other than denials, 5xx
    uint64_t shadow_denied = 0;  // descriptors denied but allowed by shadow mode
  };

  // limiter and policies (null: none, every domain unknown) must outlive the
  // front; `workers` is the Server's worker count.
  CheckFront(const HttpLimits& limits, Limiter* limiter, PolicyStore* policies, size_t workers);

  Stats stats() const;
  // Decisions by outcome and policy domain, and how long requests took: what
  // /metrics exports for front="http".
  const FrontCounters& decided() const { return decided_; }

  // Per worker; written by that worker's connections only.
  struct alignas(64) Counters {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> allowed{0};
    std::atomic<uint64_t> denied{0};
    std::atomic<uint64_t> refused{0};
    std::atomic<uint64_t> shadow_denied{0};
  };

 protected:
  std::unique_ptr<HttpHandler> NewHandler(const SessionContext& context) override;

 private:
  Limiter* const limiter_;
  PolicyStore* const policies_;
  std::vector<Counters> counters_;  // one per worker
  FrontCounters decided_;           // a stripe per worker
};

}  // namespace tally
