// RlsHandler: Envoy's ShouldRateLimit answered from policies and the engine,
// without a network (the gRPC server and a Python client are tested with a
// real tallyd).
#include "node/grpc/rls_handler.h"

#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/policy/policy_store.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

namespace rls = envoy::service::ratelimit::v3;

struct Fixture {
  explicit Fixture(const std::string& policy, RlsHandler::Options options = {})
      : limiter(Limiter::Options{.max_keys = 100, .clock = &clock}) {
    std::ofstream(dir.Path("policy.yaml")) << policy;
    REQUIRE(PolicyStore::Open({.dir = dir.Path("")}, &store).ok());
    handler = std::make_unique<RlsHandler>(options, &limiter, store.get());
  }

  grpc::Status Call(const rls::RateLimitRequest& request) {
    return handler->ShouldRateLimit(request, &response);
  }

  testing::TempDir dir;
  ManualClock clock{1'700'000'000'000};
  Limiter limiter;
  std::unique_ptr<PolicyStore> store;
  std::unique_ptr<RlsHandler> handler;
  rls::RateLimitResponse response;
};

void AddDescriptor(rls::RateLimitRequest* request,
                   std::initializer_list<std::pair<const char*, const char*>> entries) {
  auto* descriptor = request->add_descriptors();
  for (const auto& [key, value] : entries) {
    auto* entry = descriptor->add_entries();
    entry->set_key(key);
    entry->set_value(value);
  }
}

const char* kPolicy = R"(
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_ip}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: user
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
)";

// Every descriptor gets a status; the overall code is OVER_LIMIT once any descriptor is.
TEST_CASE("rls: statuses per descriptor and the overall code") {
  Fixture f(kPolicy);
  rls::RateLimitRequest request;
  request.set_domain("edge");
  AddDescriptor(&request, {{"remote_address", "10.0.0.1"}});
  AddDescriptor(&request, {{"path", "/health"}});
  AddDescriptor(&request, {{"color", "red"}});
  REQUIRE(f.Call(request).ok());
  CHECK(f.response.overall_code() == rls::RateLimitResponse::OK);
  REQUIRE(f.response.statuses_size() == 3);
  const auto& limited = f.response.statuses(0);
  CHECK(limited.code() == rls::RateLimitResponse::OK);
  CHECK(limited.current_limit().requests_per_unit() == 2);
  CHECK(limited.current_limit().unit() == rls::RateLimitResponse::RateLimit::MINUTE);
  CHECK(limited.current_limit().name() == "per_ip");
  CHECK(limited.limit_remaining() == 1);
  CHECK(limited.duration_until_reset().seconds() ==
        40);  // 1'700'000'000'000 is 20 s into its minute
  CHECK(f.response.statuses(1).limit_remaining() == 4294967295u);  // unlimited
  CHECK_FALSE(f.response.statuses(1).has_current_limit());
  CHECK(f.response.statuses(2).code() == rls::RateLimitResponse::OK);  // no policy: no limit
  CHECK_FALSE(f.response.statuses(2).has_current_limit());

  request.set_hits_addend(2);  // 1 + 2 is over 2 a minute
  REQUIRE(f.Call(request).ok());
  CHECK(f.response.overall_code() == rls::RateLimitResponse::OVER_LIMIT);
  CHECK(f.response.statuses(0).code() == rls::RateLimitResponse::OVER_LIMIT);
  CHECK(f.response.statuses(1).code() == rls::RateLimitResponse::OK);
  CHECK(f.handler->counters().over_limit == 1);
  // Only limited descriptors are checks: one allowed, then one denied, under the edge domain.
  const FrontCounters::Snapshot decided = f.handler->decided().Read();
  const size_t edge = f.store->Current()->DomainSlot("edge");
  CHECK(decided.by_domain[edge].allowed == 1);
  CHECK(decided.by_domain[edge].denied == 1);
  CHECK(decided.Total().checks() == 2);
  CHECK(decided.latency_count == 2);
}

// A shadow-mode limit reports OK while counting what it would have denied.
TEST_CASE("rls: shadow mode answers OK and counts the shadow denial") {
  Fixture f(kPolicy);
  rls::RateLimitRequest request;
  request.set_domain("edge");
  AddDescriptor(&request, {{"user", "u"}});
  for (int i = 0; i < 3; ++i) REQUIRE(f.Call(request).ok());
  CHECK(f.response.overall_code() == rls::RateLimitResponse::OK);
  CHECK(f.response.statuses(0).code() == rls::RateLimitResponse::OK);
  CHECK(f.handler->counters().shadow_denied == 2);
  CHECK(f.handler->decided().Read().Total().shadow_denied == 2);
  CHECK(f.handler->decided().Read().Total().allowed == 3);
}

// An unknown domain is OK for every descriptor; an empty domain or list is INVALID_ARGUMENT.
TEST_CASE("rls: unknown domains pass, malformed requests are refused") {
  Fixture f(kPolicy, RlsHandler::Options{.max_descriptors = 4, .max_entries = 2});
  rls::RateLimitRequest unknown;
  unknown.set_domain("nobody");
  AddDescriptor(&unknown, {{"remote_address", "10.0.0.1"}});
  REQUIRE(f.Call(unknown).ok());
  CHECK(f.response.overall_code() == rls::RateLimitResponse::OK);

  const auto refused = [&](const rls::RateLimitRequest& request) {
    const grpc::Status status = f.Call(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    return status.error_message();
  };
  rls::RateLimitRequest no_domain;
  AddDescriptor(&no_domain, {{"a", "b"}});
  CHECK(refused(no_domain) == "rate limit domain must not be empty");
  rls::RateLimitRequest no_descriptors;
  no_descriptors.set_domain("edge");
  CHECK(refused(no_descriptors) == "rate limit descriptor list must not be empty");
  rls::RateLimitRequest too_many = no_descriptors;
  for (int i = 0; i < 5; ++i) AddDescriptor(&too_many, {{"a", "b"}});
  CHECK(refused(too_many) == "5 descriptors: at most 4 per request");
  rls::RateLimitRequest empty_key = no_descriptors;
  AddDescriptor(&empty_key, {{"", "b"}});
  CHECK(refused(empty_key) == "descriptor 0 has an entry with an empty key");
  rls::RateLimitRequest deep = no_descriptors;
  AddDescriptor(&deep, {{"a", "1"}, {"b", "2"}, {"c", "3"}});
  CHECK(refused(deep) == "descriptor 0 has 3 entries: at most 2");
  rls::RateLimitRequest empty_descriptor = no_descriptors;
  empty_descriptor.add_descriptors();
  CHECK(refused(empty_descriptor) == "descriptor 0 has no entries");
  CHECK(f.handler->counters().refused == 6);
  CHECK(f.limiter.key_count() == 0);  // nothing was counted
}

// Envoy's per-descriptor limit override and hits_addend take precedence, as in
// envoyproxy/ratelimit.
TEST_CASE("rls: a descriptor's limit override and hits_addend are honoured") {
  Fixture f(kPolicy);
  rls::RateLimitRequest request;
  request.set_domain("edge");
  AddDescriptor(&request, {{"remote_address", "10.0.0.9"}});
  request.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(10);
  request.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::HOUR);
  request.mutable_descriptors(0)->mutable_hits_addend()->set_value(4);
  REQUIRE(f.Call(request).ok());
  CHECK(f.response.statuses(0).current_limit().requests_per_unit() == 10);
  CHECK(f.response.statuses(0).current_limit().unit() == rls::RateLimitResponse::RateLimit::HOUR);
  CHECK(f.response.statuses(0).limit_remaining() == 6);

  // Every unit of envoyproxy/ratelimit holds, a year (365 days) included; none is refused.
  request.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::YEAR);
  REQUIRE(f.Call(request).ok());
  CHECK(f.response.statuses(0).current_limit().unit() == rls::RateLimitResponse::RateLimit::YEAR);
  CHECK(f.response.statuses(0).limit_remaining() == 6);
  request.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::UNKNOWN);
  CHECK(f.Call(request).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

// With response headers on, the tightest descriptor's headers come back for Envoy to add.
TEST_CASE("rls: response headers from the descriptor with the least remaining") {
  Fixture f(kPolicy, RlsHandler::Options{.response_headers = true});
  rls::RateLimitRequest request;
  request.set_domain("edge");
  AddDescriptor(&request, {{"remote_address", "10.0.0.1"}});
  for (int i = 0; i < 3; ++i) REQUIRE(f.Call(request).ok());
  std::map<std::string, std::string> headers;
  for (const auto& header : f.response.response_headers_to_add())
    headers[header.key()] = header.value();
  CHECK(headers["RateLimit-Policy"] == "\"per_ip\";q=2;w=60");
  CHECK(headers["RateLimit"] == "\"per_ip\";r=0;t=40");
  CHECK(headers["X-RateLimit-Limit"] == "2");
  CHECK(headers["X-RateLimit-Remaining"] == "0");
  CHECK(headers["X-RateLimit-Reset"] == "40");
  CHECK(headers["Retry-After"] == "40");
}

// The engine's key cap is RESOURCE_EXHAUSTED for the call.
TEST_CASE("rls: a full node answers RESOURCE_EXHAUSTED") {
  Fixture f(kPolicy);
  rls::RateLimitRequest request;
  request.set_domain("edge");
  grpc::Status status;
  for (int i = 0; i < 101 && status.ok(); ++i) {
    request.clear_descriptors();
    AddDescriptor(&request, {{"remote_address", std::to_string(i).c_str()}});
    status = f.Call(request);
  }
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
}

const char* kQuotaPolicy = R"(
domain: q
descriptors:
  - {key: a, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1},
     metadata: {name: a, owner: {team: edge}}}
  - {key: b, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 5},
     metadata: {name: b, port: 80, owner: {pager: true}}}
)";

// Dynamic metadata is off by default, as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA.
TEST_CASE("rls: no dynamic metadata unless asked for") {
  Fixture f(kQuotaPolicy);
  rls::RateLimitRequest request;
  request.set_domain("q");
  AddDescriptor(&request, {{"a", "1"}});
  REQUIRE(f.Call(request).ok());
  CHECK_FALSE(f.response.has_dynamic_metadata());
}

// With response_metadata: the request, and the merged metadata of the descriptors within their
// limits; a quota-mode descriptor over its limit is OVER_LIMIT while the call is OK.
TEST_CASE("rls: dynamic metadata and quota mode, as envoyproxy/ratelimit answers them") {
  Fixture f(kQuotaPolicy, {.response_metadata = true});
  rls::RateLimitRequest request;
  request.set_domain("q");
  request.set_hits_addend(1);
  AddDescriptor(&request, {{"a", "1"}});
  AddDescriptor(&request, {{"b", "1"}});
  request.mutable_descriptors(1)->mutable_hits_addend()->set_value(1);
  REQUIRE(f.Call(request).ok());
  const auto& fields = f.response.dynamic_metadata().fields();
  CHECK(fields.at("domain").string_value() == "q");
  CHECK(fields.at("hitsAddend").number_value() == 1);
  const auto& descriptors = fields.at("descriptors").list_value();
  REQUIRE(descriptors.values_size() == 2);
  const auto& second = descriptors.values(1).struct_value().fields();
  CHECK(second.at("entries").list_value().values(0).string_value() == "b=1");
  CHECK(second.at("hitsAddend").number_value() == 1);
  const auto& merged = fields.at("metadata").struct_value().fields();
  CHECK(merged.at("name").string_value() == "a");  // the first descriptor's value
  CHECK(merged.at("port").number_value() == 80);
  CHECK(merged.at("owner").struct_value().fields().size() == 2);  // maps merge field by field

  REQUIRE(f.Call(request).ok());  // a is over its limit now, b within
  CHECK(f.response.overall_code() == rls::RateLimitResponse::OK);
  CHECK(f.response.statuses(0).code() == rls::RateLimitResponse::OVER_LIMIT);
  CHECK(f.response.statuses(1).code() == rls::RateLimitResponse::OK);
  const auto& passed = f.response.dynamic_metadata().fields().at("metadata").struct_value();
  CHECK(passed.fields().at("name").string_value() == "b");  // a's left out
  CHECK(f.handler->decided().Read().Total().quota_exceeded == 1);
}

}  // namespace
}  // namespace tally
