// Starting a LocalCluster and connecting to one of its nodes, failing the
// test on any error.
#pragma once

#include <memory>

#include <doctest/doctest.h>

#include "cluster/local_cluster.h"
#include "protocol/client.h"

namespace tally::testing {

inline std::unique_ptr<cluster::LocalCluster> MustStart(
    const cluster::LocalCluster::Options& options) {
  std::unique_ptr<cluster::LocalCluster> cluster;
  const Status status = cluster::LocalCluster::Start(options, &cluster);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return cluster;
}

inline std::unique_ptr<protocol::Client> ConnectTo(const cluster::LocalCluster& cluster,
                                                   size_t node) {
  std::unique_ptr<protocol::Client> client;
  const Status status = cluster.Connect(node, &client);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  return client;
}

}  // namespace tally::testing
