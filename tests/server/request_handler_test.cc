// RequestHandler: decoded requests in, responses and worker counters out,
// with a real engine on a ManualClock and no I/O.
#include "node/server/request_handler.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "protocol/messages.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

struct Fixture {
  Fixture()
      : limiter(LimiterOptions(&clock)), handler(&limiter, &counters, 0, [] { return Stats(); }) {}

  static Limiter::Options LimiterOptions(const Clock* clock) {
    Limiter::Options options;
    options.clock = clock;
    options.max_keys = 2;
    return options;
  }
  static protocol::StatsReply Stats() {
    protocol::StatsReply stats;
    stats.uptime_ms = 1234;
    return stats;
  }

  static protocol::Check CheckOf(std::string_view key, uint64_t limit, uint64_t cost = 1) {
    return protocol::Check{key, LimitSpec{Algorithm::kFixedWindow, limit, 1'000}, cost};
  }

  ManualClock clock{1'700'000'000'000};
  Limiter limiter;
  FrontCounters counters{1, FrontCounters::Writers::kOnePerStripe};
  RequestHandler handler;
  protocol::Response response;
};

FrontCounters::Outcomes Total(const FrontCounters& counters) { return counters.Read().Total(); }

// A batch is answered in order, one outcome per check, and the counters split allowed from denied.
TEST_CASE("request handler: decides a batch in order and counts allowed and denied") {
  Fixture f;
  protocol::Request request;
  request.id = 42;
  request.checks = {Fixture::CheckOf("a", 2), Fixture::CheckOf("a", 2), Fixture::CheckOf("a", 2)};
  f.handler.Handle(request, &f.response);

  CHECK(f.response.id == 42);
  CHECK(f.response.kind == protocol::ResponseKind::kCheck);
  REQUIRE(f.response.outcomes.size() == 3);
  CHECK(f.response.outcomes[0].decision.allowed);
  CHECK(f.response.outcomes[0].decision.remaining == 1);
  CHECK(f.response.outcomes[1].decision.allowed);
  CHECK_FALSE(f.response.outcomes[2].decision.allowed);
  CHECK(f.response.outcomes[2].decision.retry_after_ms == 1'000);
  CHECK(Total(f.counters).checks() == 3);
  CHECK(Total(f.counters).allowed == 2);
  CHECK(Total(f.counters).denied == 1);
  CHECK(Total(f.counters).errors == 0);
  // Checks with their own limit count under no domain; the request was timed once.
  CHECK(f.counters.Read().by_domain[FrontCounters::kNoDomain].checks() == 3);
  CHECK(f.counters.Read().latency_count == 1);
}

// Requests answered together keep their order: checks around another kind of request are
// decided in sequence, each answer has its request's id, and each check request is timed once.
TEST_CASE("request handler: HandleAll answers a pipeline in order, around other kinds") {
  Fixture f;
  std::vector<protocol::Request> requests(4);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].id = 100 + i;
    requests[i].checks = {Fixture::CheckOf("a", 2)};
  }
  requests[1].kind = protocol::RequestKind::kStats;
  requests[1].checks.clear();
  std::vector<protocol::Response> responses(4);
  responses[3].outcomes.resize(5);  // a reused response is replaced
  f.handler.HandleAll(requests, responses);

  for (size_t i = 0; i < responses.size(); ++i) CHECK(responses[i].id == 100 + i);
  CHECK(responses[1].kind == protocol::ResponseKind::kStats);
  CHECK(responses[1].stats.uptime_ms == 1234);
  for (const size_t i : {0, 2, 3}) {
    CHECK(responses[i].kind == protocol::ResponseKind::kCheck);
    REQUIRE(responses[i].outcomes.size() == 1);
  }
  CHECK(responses[0].outcomes[0].decision.allowed);
  CHECK(responses[2].outcomes[0].decision.allowed);
  CHECK(responses[2].outcomes[0].decision.remaining == 0);
  CHECK_FALSE(responses[3].outcomes[0].decision.allowed);
  CHECK(Total(f.counters).checks() == 3);
  CHECK(Total(f.counters).denied == 1);
  CHECK(f.counters.Read().latency_count == 3);
}

// A bad check becomes that check's error; the others in the batch are still decided.
TEST_CASE("request handler: a bad check fails alone") {
  Fixture f;
  protocol::Request request;
  request.checks = {Fixture::CheckOf("", 5), Fixture::CheckOf("ok", 5)};
  request.checks.push_back(protocol::Check{"x", LimitSpec{static_cast<Algorithm>(9), 5, 1'000}, 1});
  f.handler.Handle(request, &f.response);

  REQUIRE(f.response.outcomes.size() == 3);
  CHECK(f.response.outcomes[0].error == protocol::ErrorCode::kInvalidArgument);
  CHECK_FALSE(f.response.outcomes[0].error_message.empty());
  CHECK(f.response.outcomes[0].decision == Decision());
  CHECK(f.response.outcomes[1].error == protocol::ErrorCode::kOk);
  CHECK(f.response.outcomes[1].error_message.empty());
  CHECK(f.response.outcomes[1].decision.allowed);
  CHECK(f.response.outcomes[2].error == protocol::ErrorCode::kInvalidArgument);
  CHECK(Total(f.counters).errors == 2);
  CHECK(Total(f.counters).allowed == 1);
  CHECK(Total(f.counters).denied == 0);
}

// A new key beyond the key cap is resource_exhausted for that check only.
TEST_CASE("request handler: the key cap is a per-check resource_exhausted") {
  Fixture f;
  protocol::Request request;
  request.checks = {Fixture::CheckOf("k1", 5), Fixture::CheckOf("k2", 5), Fixture::CheckOf("k3", 5),
                    Fixture::CheckOf("k1", 5)};
  f.handler.Handle(request, &f.response);

  REQUIRE(f.response.outcomes.size() == 4);
  CHECK(f.response.outcomes[2].error == protocol::ErrorCode::kResourceExhausted);
  CHECK(f.response.outcomes[3].error == protocol::ErrorCode::kOk);
  CHECK(f.response.outcomes[3].decision.remaining == 3);
}

// A response object reused for the next request keeps nothing of the previous one.
TEST_CASE("request handler: a reused response is replaced, not appended to") {
  Fixture f;
  protocol::Request first;
  first.checks = {Fixture::CheckOf("", 5), Fixture::CheckOf("a", 5)};
  f.handler.Handle(first, &f.response);
  protocol::Request second;
  second.id = 7;
  second.checks = {Fixture::CheckOf("b", 5)};
  f.handler.Handle(second, &f.response);

  CHECK(f.response.id == 7);
  REQUIRE(f.response.outcomes.size() == 1);
  CHECK(f.response.outcomes[0].error == protocol::ErrorCode::kOk);
  CHECK(f.response.outcomes[0].error_message.empty());
  CHECK(f.response.error == protocol::ErrorCode::kOk);
}

// A stats request is answered from the stats source; an unknown kind is unsupported.
TEST_CASE("request handler: stats from the source, unknown kinds unsupported") {
  Fixture f;
  protocol::Request stats;
  stats.id = 3;
  stats.kind = protocol::RequestKind::kStats;
  f.handler.Handle(stats, &f.response);
  CHECK(f.response.kind == protocol::ResponseKind::kStats);
  CHECK(f.response.stats.uptime_ms == 1234);

  protocol::Request unknown;
  unknown.id = 4;
  unknown.kind = protocol::RequestKind::kUnknown;
  f.handler.Handle(unknown, &f.response);
  CHECK(f.response.id == 4);
  CHECK(f.response.kind == protocol::ResponseKind::kError);
  CHECK(f.response.error == protocol::ErrorCode::kUnsupported);
  CHECK(Total(f.counters).checks() == 0);
  CHECK(f.counters.Read().latency_count == 0);  // only decisions are timed
}

// The handler decides at the engine's clock: a full window passes again once the clock moves on.
TEST_CASE("request handler: decisions follow the injected clock") {
  Fixture f;
  protocol::Request request;
  request.checks = {Fixture::CheckOf("a", 1), Fixture::CheckOf("a", 1)};
  f.handler.Handle(request, &f.response);
  CHECK_FALSE(f.response.outcomes[1].decision.allowed);
  f.clock.AdvanceMs(1'000);
  request.checks = {Fixture::CheckOf("a", 1)};
  f.handler.Handle(request, &f.response);
  CHECK(f.response.outcomes[0].decision.allowed);
}

protocol::Request PolicyRequest(std::string_view domain, std::vector<DescriptorEntry> entries,
                                std::vector<uint32_t> sizes) {
  protocol::Request request;
  request.kind = protocol::RequestKind::kPolicyCheck;
  request.policy_check.domain = domain;
  request.policy_check.entries = std::move(entries);
  request.policy_check.descriptor_sizes = std::move(sizes);
  return request;
}

// A check by policy answers each descriptor under its policy, and counts like checks do.
TEST_CASE("request handler: policy checks are decided under the node's policies") {
  testing::TempDir dir;
  std::ofstream(dir.Path("p.yaml"))
      << "domain: api\ndescriptors:\n"
         "  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1, name: u}\n"
         "  - key: trial\n    shadow_mode: true\n"
         "    rate_limit: {unit: second, requests_per_unit: 0}\n";
  std::unique_ptr<PolicyStore> store;
  REQUIRE(PolicyStore::Open({.dir = dir.Path("")}, &store).ok());
  ManualClock clock(1'700'000'000'000);
  Limiter limiter(Limiter::Options{.clock = &clock});
  FrontCounters counters(1, FrontCounters::Writers::kOnePerStripe);
  RequestHandler handler(
      &limiter, &counters, 0, [] { return protocol::StatsReply(); }, store.get());
  protocol::Response response;

  const protocol::Request request =
      PolicyRequest("api", {{"user", "a"}, {"color", "red"}, {"trial", "t"}}, {1, 1, 1});
  handler.Handle(request, &response);
  handler.Handle(request, &response);
  CHECK(response.kind == protocol::ResponseKind::kPolicyCheck);
  REQUIRE(response.policy_outcomes.size() == 3);
  CHECK(response.policy_outcomes[0].kind == protocol::PolicyOutcome::Kind::kLimited);
  CHECK(response.policy_outcomes[0].rule == "u");
  CHECK_FALSE(response.policy_outcomes[0].decision.allowed);
  CHECK(response.policy_outcomes[1].kind == protocol::PolicyOutcome::Kind::kNoLimit);
  CHECK(response.policy_outcomes[2].shadow_denied);
  const FrontCounters::Snapshot counted = counters.Read();
  CHECK(counted.Total().checks() == 4);
  CHECK(counted.Total().allowed == 3);  // user once, trial twice (shadow)
  CHECK(counted.Total().denied == 1);
  CHECK(counted.Total().shadow_denied == 2);
  // All of it under the domain's slot, which the store names; each request timed once.
  REQUIRE(store->DomainSlotNames()[1] == "api");
  CHECK(counted.by_domain[1].checks() == 4);
  CHECK(counted.latency_count == 2);

  handler.Handle(PolicyRequest("", {{"user", "a"}}, {1}), &response);
  CHECK(response.kind == protocol::ResponseKind::kError);
  CHECK(response.error == protocol::ErrorCode::kInvalidArgument);
  CHECK(response.error_message == "rate limit domain must not be empty");
}

// A node without policies knows no domain: nothing is limited, nothing counted.
TEST_CASE("request handler: without policies every descriptor is unlimited by policy") {
  Fixture f;
  f.handler.Handle(PolicyRequest("api", {{"user", "a"}}, {1}), &f.response);
  REQUIRE(f.response.policy_outcomes.size() == 1);
  CHECK(f.response.policy_outcomes[0].kind == protocol::PolicyOutcome::Kind::kNoLimit);
  CHECK(f.limiter.key_count() == 0);
}

protocol::Request KeyLimitRequest(protocol::RequestKind kind, std::string_view key,
                                  const LimitSpec& spec, bool local = false) {
  protocol::Request request;
  request.kind = kind;
  request.key_limit = {key, spec, local};
  return request;
}

// Inspect shows every node's slots of the current and previous window, this
// node's and a peer's (merged in), and the log's cost and stamps per node.
TEST_CASE("request handler: inspect shows every node's counts of a limit") {
  Fixture f;
  const LimitSpec counter{Algorithm::kSlidingWindowCounter, 100, 1'000};
  Decision decision;
  REQUIRE(f.limiter.Check("k", counter, 3, &decision).ok());
  f.clock.AdvanceMs(1'000);
  REQUIRE(f.limiter.Check("k", counter, 2, &decision).ok());
  KeySnapshot peer;
  peer.key = "k";
  peer.algorithm = counter.algorithm;
  peer.window_ms = counter.window_ms;
  peer.counts.window_index = f.clock.WallMs() / 1'000;
  peer.counts.current.MergeSlot(7, 5);
  peer.counts.previous.MergeSlot(7, 4);
  REQUIRE(f.limiter.Merge(peer).ok());

  f.handler.Handle(KeyLimitRequest(protocol::RequestKind::kInspect, "k", counter), &f.response);
  REQUIRE(f.response.kind == protocol::ResponseKind::kInspect);
  const protocol::InspectReply& reply = f.response.inspect;
  CHECK(reply.node_id == f.limiter.node_id());
  CHECK(reply.found);
  CHECK(reply.window_index == f.clock.WallMs() / 1'000);
  REQUIRE(reply.nodes.size() == 2);
  CHECK(reply.nodes[0].node_id == f.limiter.node_id());
  CHECK(reply.nodes[0].current == 2);
  CHECK(reply.nodes[0].previous == 3);
  CHECK(reply.nodes[1].node_id == 7);
  CHECK(reply.nodes[1].current == 5);
  CHECK(reply.nodes[1].previous == 4);

  // The same key under another window is another limit: nothing held.
  f.handler.Handle(KeyLimitRequest(protocol::RequestKind::kInspect, "k",
                                   {Algorithm::kSlidingWindowCounter, 0, 2'000}),
                   &f.response);
  CHECK(f.response.kind == protocol::ResponseKind::kInspect);
  CHECK_FALSE(f.response.inspect.found);
  CHECK(f.response.inspect.nodes.empty());
}

// Inspect of the log sums each node's cost in the window and counts its
// stamps; of the token bucket, gives this node's level and refill time.
TEST_CASE("request handler: inspect shows the log's stamps and the bucket's level") {
  Fixture f;
  Decision decision;
  const LimitSpec log{Algorithm::kSlidingWindowLog, 100, 60'000};
  REQUIRE(f.limiter.Check("k", log, 2, &decision).ok());
  f.clock.AdvanceMs(10);
  REQUIRE(f.limiter.Check("k", log, 3, &decision).ok());
  f.handler.Handle(KeyLimitRequest(protocol::RequestKind::kInspect, "k", log), &f.response);
  REQUIRE(f.response.inspect.nodes.size() == 1);
  CHECK(f.response.inspect.nodes[0].current == 5);
  CHECK(f.response.inspect.nodes[0].stamps == 2);

  const LimitSpec bucket{Algorithm::kTokenBucket, 10, 1'000};
  REQUIRE(f.limiter.Check("b", bucket, 4, &decision).ok());
  f.handler.Handle(KeyLimitRequest(protocol::RequestKind::kInspect, "b", bucket), &f.response);
  CHECK(f.response.inspect.found);
  CHECK(f.response.inspect.bucket_level == 6 * 1'000);
  CHECK(f.response.inspect.bucket_refilled_at_ms == f.clock.WallMs());
}

// Reset forgets one limit of a key on a node without peers (the next check
// starts from nothing); a second reset finds nothing; a bad key is
// invalid_argument for the request.
TEST_CASE("request handler: reset forgets a limit on a local node") {
  Fixture f;
  const LimitSpec spec{Algorithm::kFixedWindow, 2, 3'600'000};
  Decision decision;
  REQUIRE(f.limiter.Check("k", spec, 2, &decision).ok());
  REQUIRE(f.limiter.Check("k", spec, 1, &decision).ok());
  CHECK_FALSE(decision.allowed);
  f.handler.Handle(KeyLimitRequest(protocol::RequestKind::kReset, "k", spec), &f.response);
  REQUIRE(f.response.kind == protocol::ResponseKind::kReset);
  CHECK(f.response.reset_erased);
  REQUIRE(f.limiter.Check("k", spec, 2, &decision).ok());
  CHECK(decision.allowed);
  REQUIRE(f.limiter.Erase("k", spec).ok());
  f.handler.Handle(KeyLimitRequest(protocol::RequestKind::kReset, "k", spec), &f.response);
  CHECK(f.response.kind == protocol::ResponseKind::kReset);
  CHECK_FALSE(f.response.reset_erased);
  for (const protocol::RequestKind kind :
       {protocol::RequestKind::kReset, protocol::RequestKind::kInspect}) {
    f.handler.Handle(KeyLimitRequest(kind, "", spec), &f.response);
    CHECK(f.response.kind == protocol::ResponseKind::kError);
    CHECK(f.response.error == protocol::ErrorCode::kInvalidArgument);
  }
}

// A node whose peers merge state in refuses a reset that does not say
// --local (the peers would send the counts back), and does it with it.
TEST_CASE("request handler: a clustered node resets only when told local") {
  ManualClock clock{1'700'000'000'000};
  Limiter::Options options;
  options.clock = &clock;
  options.replicate = true;
  Limiter limiter(options);
  FrontCounters counters{1, FrontCounters::Writers::kOnePerStripe};
  RequestHandler handler(&limiter, &counters, 0, [] { return protocol::StatsReply(); });
  const LimitSpec spec{Algorithm::kFixedWindow, 2, 3'600'000};
  Decision decision;
  REQUIRE(limiter.Check("k", spec, 2, &decision).ok());
  protocol::Response response;
  handler.Handle(KeyLimitRequest(protocol::RequestKind::kReset, "k", spec), &response);
  CHECK(response.kind == protocol::ResponseKind::kError);
  CHECK(response.error == protocol::ErrorCode::kInvalidArgument);
  CHECK(response.error_message.find("--local") != std::string::npos);
  CHECK(limiter.key_count() == 1);
  handler.Handle(KeyLimitRequest(protocol::RequestKind::kReset, "k", spec, /*local=*/true),
                 &response);
  CHECK(response.kind == protocol::ResponseKind::kReset);
  CHECK(response.reset_erased);
  CHECK(limiter.key_count() == 0);
}

// Forgetting a member asks the node's gossip and says what it answered; a
// node without gossip does not support it.
TEST_CASE("request handler: forget member goes to the gossip, unsupported without it") {
  ManualClock clock{1'700'000'000'000};
  Limiter limiter(Limiter::Options{1, 100, &clock});
  FrontCounters counters{1, FrontCounters::Writers::kOnePerStripe};
  protocol::Request request;
  request.kind = protocol::RequestKind::kForgetMember;
  request.member_id = 7;
  protocol::Response response;
  RequestHandler alone(&limiter, &counters, 0, [] { return protocol::StatsReply(); });
  alone.Handle(request, &response);
  CHECK(response.kind == protocol::ResponseKind::kError);
  CHECK(response.error == protocol::ErrorCode::kUnsupported);
  std::vector<NodeId> asked;
  RequestHandler clustered(
      &limiter, &counters, 0, [] { return protocol::StatsReply(); }, nullptr,
      [&asked](NodeId member, bool* forgotten) {
        asked.push_back(member);
        *forgotten = member == 7;
        return member == 9 ? Status::InvalidArgument("no member 9") : Status::OK();
      });
  clustered.Handle(request, &response);
  CHECK(response.kind == protocol::ResponseKind::kForgetMember);
  CHECK(response.member_forgotten);
  request.member_id = 9;
  clustered.Handle(request, &response);
  CHECK(response.kind == protocol::ResponseKind::kError);
  CHECK(response.error == protocol::ErrorCode::kInvalidArgument);
  CHECK(asked == std::vector<NodeId>{7, 9});
}

}  // namespace
}  // namespace tally
