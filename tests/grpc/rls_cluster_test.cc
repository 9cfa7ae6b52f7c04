// Envoy's rate limit service on a 3-node cluster: one descriptor's limit,
// defined in the nodes' policies, is enforced across the cluster when the
// calls are spread over the nodes' gRPC fronts.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include "cluster/local_cluster.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using cluster::LocalCluster;
using std::chrono::milliseconds;
using std::chrono::system_clock;

int64_t WallMs() {
  return std::chrono::duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<LocalCluster> StartCluster(const std::string& policy_dir, bool gossip) {
  LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.gossip_max_delay_ms = 100;  // far keys converge within a poll too
  options.nodes = 3;
  options.gossip = gossip;
  options.fronts = {"grpc"};
  options.node_args = {"--policy-dir", policy_dir};
  std::unique_ptr<LocalCluster> cluster;
  const Status status = LocalCluster::Start(options, &cluster);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return cluster;
}

// Calls at `demand_per_window` per 1 s window, spread evenly over the nodes'
// gRPC fronts, for `windows` whole windows; returns the calls answered OK per
// window (by the window each was sent in).
std::vector<uint64_t> OkPerWindow(LocalCluster& cluster, int demand_per_window, int windows) {
  const size_t nodes = cluster.size();
  std::vector<std::unique_ptr<rls::RateLimitService::Stub>> stubs;
  for (size_t node = 0; node < nodes; ++node) {
    uint16_t port = 0;
    const Status status = cluster.process(node).FrontPort("grpc", 5'000, &port);
    REQUIRE_MESSAGE(status.ok(), status.ToString());
    stubs.push_back(rls::RateLimitService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials())));
  }
  rls::RateLimitRequest request;
  request.set_domain("api");
  auto* entry = request.add_descriptors()->add_entries();
  entry->set_key("tenant");
  entry->set_value("acme");

  const int64_t first_window = WallMs() / 1'000 + 1;
  std::mutex mu;
  std::map<int64_t, uint64_t> ok;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  const int per_node = demand_per_window / static_cast<int>(nodes);
  for (size_t node = 0; node < nodes; ++node) {
    threads.emplace_back([&, node] {
      const int64_t spacing_us = 1'000'000 / per_node;
      for (int i = 0; i < per_node * windows; ++i) {
        // Nodes are offset by a third of the spacing, so the calls interleave.
        const int64_t at_us = first_window * 1'000'000 + i * spacing_us +
                              spacing_us * static_cast<int64_t>(node) / static_cast<int64_t>(nodes);
        std::this_thread::sleep_until(system_clock::time_point(std::chrono::microseconds(at_us)));
        grpc::ClientContext context;
        context.set_deadline(system_clock::now() + milliseconds(2'000));
        rls::RateLimitResponse response;
        const grpc::Status status = stubs[node]->ShouldRateLimit(&context, request, &response);
        if (!status.ok()) {
          ++failures;
          continue;
        }
        if (response.overall_code() == rls::RateLimitResponse::OK) {
          std::lock_guard<std::mutex> lock(mu);
          ++ok[at_us / 1'000'000];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures == 0);
  std::vector<uint64_t> per_window;
  for (int w = 0; w < windows; ++w) per_window.push_back(ok[first_window + w]);
  return per_window;
}

// Calls spread over three nodes at four times an Envoy descriptor's limit:
// the cluster admits about the limit per window, local-only nodes three times it.
TEST_CASE("grpc: three nodes hold one Envoy descriptor's limit through their gRPC fronts") {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Path("policies"));
  std::ofstream(dir.Path("policies/api.yaml"))
      << "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, "
         "requests_per_unit: 60}\n";
  constexpr uint64_t kLimit = 60;
  constexpr int kDemand = 240;  // per window, all nodes: 4x
  // The bound of the cluster tests: the demand of 150 ms (interval, delivery, slack) over the
  // limit.
  constexpr uint64_t kBound = kLimit + kDemand * 150 / 1'000;
  {
    auto cluster = StartCluster(dir.Path("policies"), /*gossip=*/true);
    for (uint64_t admitted : OkPerWindow(*cluster, kDemand, 3)) {
      MESSAGE("3-node cluster admitted " << admitted << " of limit " << kLimit);
      CHECK(admitted <= kBound);
      CHECK(admitted >= kLimit * 9 / 10);
    }
  }
  {
    auto local_only = StartCluster(dir.Path("policies"), /*gossip=*/false);
    for (uint64_t admitted : OkPerWindow(*local_only, kDemand, 3)) {
      MESSAGE("3 local-only nodes admitted " << admitted << " of limit " << kLimit);
      CHECK(admitted >= 3 * kLimit * 9 / 10);
    }
  }
}

}  // namespace
}  // namespace tally
