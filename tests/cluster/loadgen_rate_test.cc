// tally-loadgen's fixed rate (--rate) against one real tallyd on loopback:
// the benchmarks' sustained loads rely on it.
#include <fstream>
#include <iterator>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "cluster/node_process.h"
#include "tests/support/cluster_client.h"
#include "tests/support/temp_dir.h"

namespace tally::cluster {
namespace {

// With --rate the load is paced, whatever the node could answer: 2,000
// requests a second for a second over 4 connections sends about 2,000.
TEST_CASE("loadgen: a fixed rate paces the requests") {
  LocalCluster::Options options;
  options.tallyd_path = TALLYD_PATH;
  options.nodes = 1;
  options.gossip = false;
  const auto node = testing::MustStart(options);
  testing::TempDir dir;
  const std::string json_path = dir.Path("load.json");
  std::string out;
  REQUIRE(RunCommand({LOADGEN_PATH, "--target", "tally", "--address",
                      "127.0.0.1:" + std::to_string(node->client_port(0)), "--connections", "4",
                      "--depth", "4", "--keys", "100", "--rate", "2000", "--duration-ms", "1000",
                      "--json", json_path},
                     &out, 30'000) == 0);
  std::ifstream in(json_path);
  const nlohmann::json result = nlohmann::json::parse(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  const uint64_t requests = result.at("requests").get<uint64_t>();
  MESSAGE(requests << " requests");
  CHECK(requests >= 1'800);
  CHECK(requests <= 2'100);
}

}  // namespace
}  // namespace tally::cluster
