// The check front and the admin front in-process: requests in, exact
// statuses, headers and JSON out, decided by a real engine and real policies
// on a ManualClock. No sockets.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "node/common/readiness.h"
#include "node/engine/limiter.h"
#include "node/http/admin_front.h"
#include "node/http/check_front.h"
#include "node/http/json_writer.h"
#include "node/http/query_string.h"
#include "node/policy/policy_store.h"
#include "tests/http/http_wire.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

// A node's engine and policies behind a check front, on a ManualClock 800 s
// into an hour (so an hour's window resets in 2800 s).
struct Node {
  Node() : limiter(LimiterOptions(&clock)) {
    std::filesystem::copy_file(EDGE_POLICY_PATH, dir.Path("edge.yaml"));  // tests/http/
    REQUIRE(PolicyStore::Open({.dir = dir.Path("")}, &policies).ok());
    front = std::make_unique<CheckFront>(HttpLimits(), &limiter, policies.get(), 1);
  }
  static Limiter::Options LimiterOptions(const Clock* clock) {
    Limiter::Options options;
    options.clock = clock;
    options.max_keys = 3;
    return options;
  }
  // The answer to one request on a new connection.
  std::string Ask(const std::string& request) {
    Wire wire(front.get());
    wire.Feed(request);
    return wire.out;
  }
  std::string Post(const std::string& path, const std::string& body) {
    return Ask("POST " + path + " HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\n\r\n" + body);
  }

  testing::TempDir dir;
  ManualClock clock{1'700'000'000'000};
  Limiter limiter;
  std::unique_ptr<PolicyStore> policies;
  std::unique_ptr<CheckFront> front;
};

nlohmann::json BodyOf(const std::string& answer) {
  return nlohmann::json::parse(answer.substr(answer.find("\r\n\r\n") + 4));
}

// An explicit-limit check: 200 with the draft's and the X- headers, then 429 with Retry-After.
TEST_CASE("check front: explicit limits answer 200 then 429 with exact headers") {
  Node node;
  const std::string body =
      R"({"key":"k","algorithm":"fixed_window","limit":1,"window_ms":3600000})";
  const std::string allowed = node.Post("/v1/check", body);
  CHECK(allowed.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(allowed.find("\r\nRateLimit-Policy: \"k\";q=1;w=3600\r\n"
                     "RateLimit: \"k\";r=0;t=2800\r\n"
                     "X-RateLimit-Limit: 1\r\nX-RateLimit-Remaining: 0\r\n"
                     "X-RateLimit-Reset: 2800\r\n\r\n") != std::string::npos);
  CHECK(BodyOf(allowed)["allowed"] == true);
  const std::string denied = node.Post("/v1/check", body);
  CHECK(denied.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
  CHECK(denied.find("\r\nRetry-After: 2800\r\n") != std::string::npos);
  CHECK(BodyOf(denied)["retry_after_ms"] == 2'800'000);
  // The GET form counts on the same key.
  CHECK(node.Ask("GET /v1/check?key=k&algorithm=fixed_window&limit=1&window_ms=3600000 "
                 "HTTP/1.1\r\n\r\n")
            .starts_with("HTTP/1.1 429"));
  const CheckFront::Stats stats = node.front->stats();
  CHECK(stats.requests == 3);
  CHECK(stats.allowed == 1);
  CHECK(stats.denied == 2);
}

// A check by policy from the query string and from JSON share the policy's counter.
TEST_CASE("check front: policy checks by GET and POST, 429 past the limit, 403 at limit 0") {
  Node node;
  const std::string get = "GET /v1/policy?domain=edge&remote_address=10.0.0.1 HTTP/1.1\r\n\r\n";
  const std::string first = node.Ask(get);
  CHECK(first.starts_with("HTTP/1.1 200"));
  CHECK(first.find("RateLimit-Policy: \"per_ip\";q=2;w=3600\r\n") != std::string::npos);
  const std::string json =
      R"({"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]})";
  CHECK(node.Post("/v1/policy", json).starts_with("HTTP/1.1 200"));
  const std::string third = node.Ask(get);
  CHECK(third.starts_with("HTTP/1.1 429"));
  CHECK(third.find("Retry-After: 2800\r\n") != std::string::npos);
  const nlohmann::json body = BodyOf(third);
  CHECK(body["allowed"] == false);
  CHECK(body["descriptors"][0]["rule"] == "per_ip");
  // nginx's auth_request form: the same denial as 403.
  CHECK(node.Ask("GET /v1/auth?domain=edge&remote_address=10.0.0.1 HTTP/1.1\r\n\r\n")
            .starts_with("HTTP/1.1 403 Forbidden"));
  // A limit of 0: no wait helps, 403 without Retry-After.
  const std::string blocked = node.Ask("GET /v1/policy?domain=edge&blocked=x HTTP/1.1\r\n\r\n");
  CHECK(blocked.starts_with("HTTP/1.1 403"));
  CHECK(blocked.find("Retry-After") == std::string::npos);
}

// Shadow mode: the would-be denial is allowed, and said so in the body and a header.
TEST_CASE("check front: a shadow-mode denial answers 200 and says so") {
  Node node;
  CHECK(
      node.Ask("GET /v1/policy?domain=edge&trial=1 HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
  const std::string second = node.Ask("GET /v1/policy?domain=edge&trial=1 HTTP/1.1\r\n\r\n");
  CHECK(second.starts_with("HTTP/1.1 200"));
  CHECK(second.find("Tally-Shadow-Denied: 1\r\n") != std::string::npos);
  CHECK(second.find("Retry-After") == std::string::npos);
  CHECK(BodyOf(second)["shadow_denied"] == true);
  CHECK(node.front->stats().shadow_denied == 1);
}

// Quota mode: over one quota while another has room answers 200, says so, and carries each
// rule's metadata in the body.
TEST_CASE("check front: a quota-mode excess answers 200 and says so, with metadata") {
  Node node;
  std::ofstream(node.dir.Path("quota.yaml"))
      << "domain: quota\ndescriptors:\n"
         "  - {key: a, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1},\n"
         "     metadata: {tier: gold}}\n"
         "  - {key: b, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 5}}\n";
  REQUIRE(node.policies->Reload().ok());
  const std::string body =
      R"({"domain": "quota", "descriptors": [{"entries": [{"key": "a", "value": "1"}]},)"
      R"( {"entries": [{"key": "b", "value": "1"}]}]})";
  CHECK(node.Post("/v1/policy", body).starts_with("HTTP/1.1 200"));
  const std::string second = node.Post("/v1/policy", body);
  CHECK(second.starts_with("HTTP/1.1 200"));
  CHECK(second.find("Tally-Quota-Exceeded: 1\r\n") != std::string::npos);
  const nlohmann::json decision = BodyOf(second);
  CHECK(decision["quota_exceeded"] == true);
  CHECK(decision["descriptors"][0]["quota_exceeded"] == true);
  CHECK(decision["descriptors"][0]["metadata"] == nlohmann::json{{"tier", "gold"}});
  CHECK_FALSE(decision["descriptors"][1].contains("metadata"));
  CHECK(node.front->decided().Read().Total().quota_exceeded == 1);
}

// Bad input: a clear status and a JSON error, nothing counted.
TEST_CASE("check front: bad requests get 400, 404, 405 or 503 with a JSON error") {
  Node node;
  const auto status_of = [](const std::string& answer) { return answer.substr(9, 3); };
  CHECK(status_of(node.Post("/v1/check", "{not json")) == "400");
  CHECK(status_of(node.Post("/v1/check", R"({"key":"k","limit":-1,"window_ms":1000})")) == "400");
  CHECK(status_of(node.Post("/v1/check", R"({"key":"k","limit":1})")) == "400");
  CHECK(status_of(node.Post(
            "/v1/check", R"({"key":"k","algorithm":"nope","limit":1,"window_ms":1000})")) == "400");
  CHECK(status_of(node.Post("/v1/check", R"({"key":"","limit":1,"window_ms":1000})")) == "400");
  const std::string unknown = node.Ask("GET /v1/policy?domain=nope&a=b HTTP/1.1\r\n\r\n");
  CHECK(status_of(unknown) == "400");
  CHECK(BodyOf(unknown)["error"] == "unknown domain 'nope': no policy defines it");
  CHECK(status_of(node.Ask("GET /v1/policy?domain=edge&a=%zz HTTP/1.1\r\n\r\n")) == "400");
  CHECK(status_of(node.Ask("GET /elsewhere HTTP/1.1\r\n\r\n")) == "404");
  const std::string put = node.Ask("PUT /v1/check HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  CHECK(status_of(put) == "405");
  CHECK(put.find("Allow: GET, POST\r\n") != std::string::npos);
  // The key cap (3 keys): a new key beyond it is 503; held keys go on.
  for (const char* key : {"a", "b", "c"}) {
    CHECK(status_of(node.Ask(std::string("GET /v1/check?key=") + key +
                             "&limit=5&window_ms=3600000 HTTP/1.1\r\n\r\n")) == "200");
  }
  CHECK(status_of(node.Ask("GET /v1/check?key=d&limit=5&window_ms=3600000 HTTP/1.1\r\n\r\n")) ==
        "503");
  CHECK(status_of(node.Ask("GET /v1/check?key=a&limit=5&window_ms=3600000 HTTP/1.1\r\n\r\n")) ==
        "200");
  const CheckFront::Stats stats = node.front->stats();
  CHECK(stats.refused == 10);
  CHECK(stats.allowed == 4);
  CHECK(stats.denied == 0);
}

// /readyz says what the node waits for until it is ready; /metrics needs its function.
TEST_CASE("admin front: healthz, readyz while waiting and once ready, metrics") {
  Readiness readiness;
  AdminFront without_metrics(HttpLimits(), &readiness, AdminFront::Metrics());
  const auto ask = [](AdminFront* front, const std::string& request) {
    Wire wire(front);
    wire.Feed(request);
    return wire.out;
  };
  readiness.SetWaiting("restoring keys");
  CHECK(ask(&without_metrics, "GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
  const std::string waiting = ask(&without_metrics, "GET /readyz HTTP/1.1\r\n\r\n");
  CHECK(waiting.starts_with("HTTP/1.1 503"));
  CHECK(waiting.ends_with("\r\n\r\nnot ready: restoring keys\n"));
  readiness.SetReady();
  CHECK(ask(&without_metrics, "GET /readyz HTTP/1.1\r\n\r\n").ends_with("\r\n\r\nready\n"));
  CHECK(ask(&without_metrics, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
  CHECK(ask(&without_metrics, "GET /metrics HTTP/1.1\r\n\r\n")
            .ends_with("\r\n\r\nmetrics not built in\n"));
  CHECK(ask(&without_metrics, "POST /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
  CHECK(ask(&without_metrics, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));

  AdminFront with_metrics(HttpLimits(), &readiness, [] { return std::string("up 1\n"); });
  const std::string metrics = ask(&with_metrics, "GET /metrics HTTP/1.1\r\n\r\n");
  CHECK(metrics.starts_with("HTTP/1.1 200"));
  CHECK(metrics.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") !=
        std::string::npos);
  CHECK(metrics.ends_with("\r\n\r\nup 1\n"));
}

// Query strings: order kept, percent-decoding, '+' as a space, bad escapes refused.
TEST_CASE("query string: parameters in order, decoded") {
  QueryParams params;
  REQUIRE(ParseQuery("domain=edge&path=%2Fapi%2Fv1&&name=a+b&flag", &params).ok());
  REQUIRE(params.size() == 4);
  CHECK(params[0] == std::pair<std::string, std::string>{"domain", "edge"});
  CHECK(params[1].second == "/api/v1");
  CHECK(params[2].second == "a b");
  CHECK(params[3] == std::pair<std::string, std::string>{"flag", ""});
  CHECK_FALSE(ParseQuery("a=%4", &params).ok());
  CHECK_FALSE(ParseQuery("a=%g0", &params).ok());
}

// The JSON writer's output parses back, escapes what needs escaping, and replaces invalid UTF-8.
TEST_CASE("json writer: plain and escaped strings, numbers, nesting") {
  std::string out;
  JsonWriter json(&out);
  json.BeginObject();
  json.String("plain", "user:42");
  json.String("quoted", "a\"b\\c\n");
  json.String("bad utf-8", "\xff");
  json.Number("n", 18446744073709551615ull);
  json.BeginArray("list");
  json.BeginObject();
  json.Bool("t", true);
  json.EndObject();
  json.BeginObject();
  json.EndObject();
  json.EndArray();
  json.EndObject();
  const nlohmann::json parsed = nlohmann::json::parse(out);
  CHECK(parsed["plain"] == "user:42");
  CHECK(parsed["quoted"] == "a\"b\\c\n");
  CHECK(parsed["bad utf-8"] == "\xef\xbf\xbd");
  CHECK(parsed["n"] == 18446744073709551615ull);
  CHECK(parsed["list"].size() == 2);
  CHECK(parsed["list"][0]["t"] == true);
}

}  // namespace
}  // namespace tally
