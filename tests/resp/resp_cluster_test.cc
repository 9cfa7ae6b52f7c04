// The RESP front on a 3-node cluster, driven by hiredis (Debian's
// libhiredis-dev), a client tally did not write: a counting limit checked
// with TALLY.CHECK on every node is one limit for the whole cluster.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hiredis/hiredis.h>

#include "cluster/local_cluster.h"

namespace tally {
namespace {

using cluster::LocalCluster;

// One hiredis connection to a node's RESP port.
class Connection {
 public:
  Connection(LocalCluster& cluster, size_t node) {
    uint16_t port = 0;
    const Status status = cluster.process(node).FrontPort("resp", 5'000, &port);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    context_.reset(redisConnectWithTimeout("127.0.0.1", port, timeval{5, 0}));
    REQUIRE(context_ != nullptr);
    REQUIRE_MESSAGE(context_->err == 0, context_->errstr);
    redisSetTimeout(context_.get(), timeval{5, 0});
  }

  // The name/value pairs of a TALLY.CHECK reply (RESP2).
  std::map<std::string, long long> Check(const std::string& key, const char* algorithm,
                                         long long limit, long long window_ms, long long cost) {
    std::unique_ptr<redisReply, void (*)(void*)> reply(
        static_cast<redisReply*>(redisCommand(context_.get(), "TALLY.CHECK %s %s %lld %lld %lld",
                                              key.c_str(), algorithm, limit, window_ms, cost)),
        freeReplyObject);
    REQUIRE(reply != nullptr);
    REQUIRE_MESSAGE(reply->type == REDIS_REPLY_ARRAY, (reply->str ? reply->str : ""));
    std::map<std::string, long long> fields;
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
      fields[reply->element[i]->str] = reply->element[i + 1]->integer;
    }
    return fields;
  }

  // CL.THROTTLE's five integers.
  std::vector<long long> Throttle(const std::string& key, long long burst, long long count,
                                  long long period_s, long long quantity) {
    std::unique_ptr<redisReply, void (*)(void*)> reply(
        static_cast<redisReply*>(redisCommand(context_.get(), "CL.THROTTLE %s %lld %lld %lld %lld",
                                              key.c_str(), burst, count, period_s, quantity)),
        freeReplyObject);
    REQUIRE(reply != nullptr);
    REQUIRE(reply->type == REDIS_REPLY_ARRAY);
    std::vector<long long> integers;
    for (size_t i = 0; i < reply->elements; ++i) integers.push_back(reply->element[i]->integer);
    return integers;
  }

 private:
  std::unique_ptr<redisContext, void (*)(redisContext*)> context_{nullptr, redisFree};
};

std::unique_ptr<LocalCluster> StartCluster() {
  LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.gossip_max_delay_ms = 100;  // far keys converge within a poll too
  options.nodes = 3;
  options.fronts = {"resp"};
  std::unique_ptr<LocalCluster> cluster;
  const Status status = LocalCluster::Start(options, &cluster);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  REQUIRE(cluster->WaitConnected(20'000).ok());
  return cluster;
}

// Polls (every 20 ms, up to 10 s) until `done` holds.
template <typename Done>
bool WaitFor(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// 10 admissions on each of 3 nodes at once fill a limit of 30 (an hour's
// sliding counter): a node that has spent its share of what remains says how
// long to wait, and the same check passes then. Once gossip has spread the
// counts, every node denies the next.
TEST_CASE("resp cluster: a TALLY.CHECK limit holds across three nodes") {
  const std::unique_ptr<LocalCluster> cluster = StartCluster();
  std::vector<std::unique_ptr<Connection>> nodes;
  for (size_t node = 0; node < 3; ++node)
    nodes.push_back(std::make_unique<Connection>(*cluster, node));
  constexpr long long kLimit = 30, kWindowMs = 3'600'000;
  for (int i = 0; i < 10; ++i) {
    for (auto& node : nodes) {
      for (int attempt = 0;; ++attempt) {
        const auto decided = node->Check("shared", "sliding_counter", kLimit, kWindowMs, 1);
        if (decided.at("allowed") == 1) break;
        REQUIRE(attempt < 20);
        const long long retry_after_ms = decided.at("retry_after_ms");
        REQUIRE(retry_after_ms > 0);
        REQUIRE(retry_after_ms <= 1'000);  // a gossip round, not the window
        std::this_thread::sleep_for(std::chrono::milliseconds(retry_after_ms));
      }
    }
  }
  for (auto& node : nodes) {  // a peek (cost 0) consumes nothing
    CHECK(WaitFor([&] {
      return node->Check("shared", "sliding_counter", kLimit, kWindowMs, 0)["remaining"] == 0;
    }));
  }
  for (auto& node : nodes) {
    const auto denied = node->Check("shared", "sliding_counter", kLimit, kWindowMs, 1);
    CHECK(denied.at("allowed") == 0);
    CHECK(denied.at("retry_after_ms") > 0);
  }
}

// The same for redis-cell's command: a bucket of 10 (one token an hour) is
// drawn from through all three nodes in turn, each draw seen by every node
// (peeks, quantity 0, consume nothing) before the next; after 10, every node
// limits the 11th and says to retry in about an hour.
TEST_CASE("resp cluster: a CL.THROTTLE bucket holds across three nodes") {
  const std::unique_ptr<LocalCluster> cluster = StartCluster();
  std::vector<std::unique_ptr<Connection>> nodes;
  for (size_t node = 0; node < 3; ++node)
    nodes.push_back(std::make_unique<Connection>(*cluster, node));
  for (long long drawn = 1; drawn <= 10; ++drawn) {
    CAPTURE(drawn);
    // A node's share of what remains may hold a draw for a round: redis-cell
    // says "retry in 1 s" then (seconds, rounded up), and the draw passes.
    std::vector<long long> reply;
    for (int attempt = 0; attempt < 3; ++attempt) {
      reply = nodes[static_cast<size_t>(drawn) % 3]->Throttle("bucket", 9, 1, 3600, 1);
      if (reply[0] == 0 || reply[3] != 1) break;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    CHECK_MESSAGE(reply[0] == 0, "limited " << reply[0] << ", remaining " << reply[2]
                                            << ", retry after " << reply[3] << " s");
    for (auto& node : nodes) {
      CHECK(WaitFor([&] { return node->Throttle("bucket", 9, 1, 3600, 0)[2] == 10 - drawn; }));
    }
  }
  for (auto& node : nodes) {
    const std::vector<long long> limited = node->Throttle("bucket", 9, 1, 3600, 1);
    CHECK(limited[0] == 1);
    CHECK(limited[1] == 10);
    CHECK(limited[3] > 3'500);
    CHECK(limited[3] <= 3'600);
  }
}

}  // namespace
}  // namespace tally
