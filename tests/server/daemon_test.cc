// Integration tests: real tallyd processes on 127.0.0.1, driven by the client.
#include <signal.h>

#include <atomic>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "node/engine/limiter.h"
#include "tests/support/must_check.h"
#include "tests/support/tallyd_process.h"

namespace tally {
namespace {

using protocol::Check;
using protocol::CheckOutcome;
using testing::MustCheck;
using testing::TallydProcess;

std::unique_ptr<TallydProcess> StartTallyd(const std::vector<std::string>& args = {}) {
  std::unique_ptr<TallydProcess> process;
  const Status status = testing::StartTallyd(args, &process);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return process;
}

std::unique_ptr<protocol::Client> ConnectTo(const TallydProcess& process) {
  std::unique_ptr<protocol::Client> client;
  const Status status = process.Connect(&client);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return client;
}

// The daemon decides exactly as the engine does (windows long enough that the
// few milliseconds between the two never matter).
TEST_CASE("daemon: decisions match the engine") {
  auto tallyd = StartTallyd();
  auto client = ConnectTo(*tallyd);
  Limiter engine(Limiter::Options{});
  const LimitSpec specs[] = {{Algorithm::kFixedWindow, 5, 3'600'000},
                             {Algorithm::kSlidingWindowLog, 5, 3'600'000},
                             {Algorithm::kSlidingWindowCounter, 5, 3'600'000},
                             {Algorithm::kTokenBucket, 5, 3'600'000}};
  for (const LimitSpec& spec : specs) {
    CAPTURE(AlgorithmName(spec.algorithm));
    for (const uint64_t cost : {1, 2, 0, 3, 1, 9, 1}) {
      Decision expected;
      REQUIRE(engine.Check("same-key", spec, cost, &expected).ok());
      const Decision actual = MustCheck(*client, {"same-key", spec, cost});
      CHECK(actual.allowed == expected.allowed);
      CHECK(actual.never_allowed == expected.never_allowed);
      CHECK(actual.limit == expected.limit);
      CHECK(actual.remaining == expected.remaining);
      CHECK((actual.retry_after_ms > 0) == (expected.retry_after_ms > 0));
    }
  }
}

// Pipelined requests come back in order, each with its own id.
TEST_CASE("daemon: pipelined requests are answered in order by id") {
  auto tallyd = StartTallyd();
  auto client = ConnectTo(*tallyd);
  const LimitSpec spec{Algorithm::kFixedWindow, 60, 3'600'000};
  std::vector<uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    protocol::Request request;
    request.checks = {{"piped", spec, 1}};
    uint64_t id = 0;
    client->Send(std::move(request), &id);
    ids.push_back(id);
  }
  REQUIRE(client->Flush().ok());
  int allowed = 0;
  for (const uint64_t id : ids) {
    protocol::Response response;
    REQUIRE(client->Receive(&response).ok());
    CHECK(response.id == id);
    REQUIRE(response.outcomes.size() == 1);
    allowed += response.outcomes[0].decision.allowed ? 1 : 0;
  }
  CHECK(allowed == 60);
}

// Many clients at once, on several connections and one shared key: every
// admission counts against the one limit, and stats add up.
TEST_CASE("daemon: many concurrent connections share one limit") {
  auto tallyd = StartTallyd();
  const LimitSpec spec{Algorithm::kSlidingWindowCounter, 500, 3'600'000};
  constexpr int kClients = 32;
  constexpr int kChecksPerClient = 40;
  std::atomic<int> allowed{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      std::unique_ptr<protocol::Client> client;
      if (!tallyd->Connect(&client).ok()) {
        ++failures;
        return;
      }
      for (int i = 0; i < kChecksPerClient; ++i) {
        CheckOutcome outcome;
        if (!client->Check({"shared", spec, 1}, &outcome).ok()) ++failures;
        allowed += outcome.decision.allowed ? 1 : 0;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures.load() == 0);
  CHECK(allowed.load() == 500);
  protocol::StatsReply stats;
  REQUIRE(ConnectTo(*tallyd)->Stats(&stats).ok());
  CHECK(stats.checks == kClients * kChecksPerClient);
  CHECK(stats.allowed == 500);
  CHECK(stats.denied == kClients * kChecksPerClient - 500);
  CHECK(stats.keys == 1);
  CHECK(stats.connections_total >= kClients + 1);
}

// SIGTERM: the daemon stops accepting, closes idle connections and exits 0.
TEST_CASE("daemon: clean shutdown on SIGTERM") {
  auto tallyd = StartTallyd();
  auto idle = ConnectTo(*tallyd);
  auto active = ConnectTo(*tallyd);
  MustCheck(*active, {"k", {Algorithm::kFixedWindow, 10, 60'000}, 1});
  CHECK(tallyd->SignalAndWait(SIGTERM, 10'000) == 0);
  protocol::Response response;
  CHECK(idle->Receive(&response).code() == Status::Code::kUnavailable);  // closed, no reply
  std::unique_ptr<protocol::Client> late;
  CHECK_FALSE(tallyd->Connect(&late).ok());
}

// tallyctl's exit status tells allowed (0), denied (1) and error (2).
TEST_CASE("daemon: tallyctl exit status and json") {
  auto tallyd = StartTallyd();
  const std::string port = std::to_string(tallyd->port());
  const std::vector<std::string> base = {TALLYCTL_PATH, "--port",  port, "--json",      "check",
                                         "cli-key",     "--limit", "1",  "--window-ms", "3600000"};
  std::string out;
  CHECK(testing::RunCommand(base, &out) == 0);
  CHECK(out.find("\"allowed\":true") != std::string::npos);
  CHECK(testing::RunCommand(base, &out) == 1);
  CHECK(out.find("\"retry_after_ms\":") != std::string::npos);
  std::vector<std::string> bad = base;
  bad.insert(bad.end(), {"--algorithm", "leaky"});
  CHECK(testing::RunCommand(bad, &out) == 2);
  CHECK(out.find("unknown algorithm") != std::string::npos);
  CHECK(testing::RunCommand({TALLYCTL_PATH, "--port", port, "stats"}, &out) == 0);
  CHECK(out.find("checks 2") != std::string::npos);
}

// tallyctl checks its arguments before it connects, has no default limit, peeks without
// consuming, and finds its node through --addr or TALLY_ADDR.
TEST_CASE("daemon: tallyctl validates first, peeks, and reads TALLY_ADDR") {
  std::string out;
  // No node listens on port 1: argument errors must still be argument errors.
  CHECK(testing::RunCommand({TALLYCTL_PATH, "--port", "1", "check", "k"}, &out) == 2);
  CHECK(testing::RunCommand({TALLYCTL_PATH, "--port", "1", "--json", "check", "k", "--limit", "5",
                             "--window-ms", "1000", "--algorithm", "leaky"},
                            &out) == 2);
  CHECK(out.find("\"error\":\"invalid_argument\"") != std::string::npos);
  CHECK(testing::RunCommand({TALLYCTL_PATH, "--port", "1", "--json", "check", "k", "--limit", "5",
                             "--window-ms", "0"},
                            &out) == 2);
  CHECK(out.find("invalid_argument") != std::string::npos);
  CHECK(testing::RunCommand({TALLYCTL_PATH, "--addr", "no-port", "stats"}, &out) == 2);

  auto tallyd = StartTallyd();
  const std::string addr = "127.0.0.1:" + std::to_string(tallyd->port());
  const std::vector<std::string> peek = {"/usr/bin/env", "TALLY_ADDR=" + addr,
                                         TALLYCTL_PATH,  "--json",
                                         "peek",         "p-key",
                                         "--limit",      "2",
                                         "--window-ms",  "3600000"};
  for (int i = 0; i < 3; ++i) {
    CHECK(testing::RunCommand(peek, &out) == 0);
    CHECK(out.find("\"remaining\":2") != std::string::npos);  // a peek consumes nothing
  }
  CHECK(testing::RunCommand({TALLYCTL_PATH, "--addr", addr, "--json", "check", "p-key", "--limit",
                             "2", "--window-ms", "3600000"},
                            &out) == 0);
  CHECK(out.find("\"remaining\":1") != std::string::npos);
}

}  // namespace
}  // namespace tally
