// RlsHandler: Envoy's ShouldRateLimit (envoy.service.ratelimit.v3), decided
// by the node's policies and engine; no I/O (RlsServer carries the calls).
//
// Semantics, as Envoy and envoyproxy/ratelimit define them:
//  - every descriptor is checked (node/policy/policy_checker.h); the
//    overall code is OVER_LIMIT when any is, else OK;
//  - statuses has one entry per descriptor: code, current_limit
//    (requests_per_unit, the unit when the window is a whole one, the rule's
//    name), limit_remaining, duration_until_reset; a descriptor that matches
//    no policy is OK with no current_limit; an unlimited one is OK with
//    limit_remaining 2^32-1; a quota-mode descriptor over its limit is
//    OVER_LIMIT even when quota mode lets the request pass;
//  - hits_addend is the cost (0 means 1), a descriptor's own hits_addend
//    and limit override take precedence, as in envoyproxy/ratelimit;
//  - an unknown domain answers OK for every descriptor and is logged once;
//  - with Options::response_headers, the headers of the descriptor with the
//    least remaining (node/common/ratelimit_headers.h) are returned in
//    response_headers_to_add;
//  - with Options::response_metadata, dynamic_metadata holds what
//    envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA returns: "domain",
//    "descriptors" ({"entries": ["key=value", ...], "limit"?,
//    "hitsAddend"?} each), "hitsAddend" when the request set one, and
//    "metadata": the policies' metadata of the descriptors not over their
//    limits, merged (MergeMetadata: the first descriptor's value wins).
// Bad requests get INVALID_ARGUMENT with a message: an empty domain, no
// descriptors, more than max_descriptors, a descriptor without entries or
// with more than max_entries, an empty key. A key cap hit in the engine is
// RESOURCE_EXHAUSTED. Nothing is counted for a refused request.
//
// Thread safety: ShouldRateLimit may be called from any number of threads
// at once; the counters are relaxed atomics; the set of domains already
// logged is behind a mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include <grpcpp/support/status.h>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "node/common/front_counters.h"
#include "node/engine/limiter.h"
#include "node/policy/policy_store.h"

namespace tally {

class RlsHandler {
 public:
  struct Options {
    size_t max_descriptors = 256;  // per request
    size_t max_entries = 32;       // per descriptor
    bool response_headers = false;
    bool response_metadata = false;
  };

  struct Counters {
    std::atomic<uint64_t> requests{0};       // answered with OK status
    std::atomic<uint64_t> over_limit{0};     // of those, overall OVER_LIMIT
    std::atomic<uint64_t> shadow_denied{0};  // descriptors denied but allowed by shadow mode
    std::atomic<uint64_t> refused{0};        // answered with an error status
  };

  // limiter and policies (null: none, every domain unknown) must outlive the handler.
  RlsHandler(const Options& options, Limiter* limiter, PolicyStore* policies);

  grpc::Status ShouldRateLimit(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                               envoy::service::ratelimit::v3::RateLimitResponse* response);

  const Counters& counters() const { return counters_; }
  // Descriptors decided, by domain and outcome, and the time calls took to
  // decide (validation refusals are in Counters::refused only).
  const FrontCounters& decided() const { return decided_; }

 private:
  grpc::Status Validate(const envoy::service::ratelimit::v3::RateLimitRequest& request) const;
  void LogUnknownDomainOnce(const std::string& domain);

  const Options options_;
  Limiter* const limiter_;
  PolicyStore* const policies_;
  Counters counters_;
  FrontCounters decided_{FrontCounters::kThreadStripes, FrontCounters::Writers::kAny};
  std::mutex logged_mu_;
  std::set<std::string> logged_domains_;  // at most kMaxLoggedDomains
};

}  // namespace tally
