// Fronts: what tallyd serves besides its own protocol, and the policies
// they decide by: the policy directory (--policy-dir) and Envoy's rate limit
// service over gRPC (--grpc-port). tallyd_main wires them; this keeps their
// flags, their start-up order and their stats in one place.
//
// Thread safety: Start, Stop and the accessors from tallyd's main thread;
// ReloadPolicies and AddStats from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "node/grpc/rls_server.h"
#include "node/metrics/metrics.h"
#include "node/policy/policy_store.h"
#include "protocol/messages.h"

namespace tally::bin {

struct FrontOptions {
  std::string policy_dir;  // empty: no policies
  int64_t policy_poll_ms = 1'000;
  int grpc_port = -1;        // -1: no gRPC front; 0: an ephemeral port
  std::string grpc_address;  // empty: tallyd's --address
  std::string grpc_port_file;
  RlsServer::Options grpc;
};

// The flags of the fronts, with their ranges.
void AddFrontOptions(CLI::App* app, FrontOptions* options);

class Fronts {
 public:
  // Loads the policies: a directory that does not load is an error (the node
  // must not start). No front listens yet.
  static Status LoadPolicies(const FrontOptions& options, std::unique_ptr<Fronts>* fronts);

  // Starts the policy watcher and the gRPC front (when --grpc-port is set) on
  // `default_address` unless --grpc-address says otherwise. limiter must
  // outlive the fronts.
  Status Serve(const std::string& default_address, Limiter* limiter);
  // Stops the gRPC front (calls in flight get drain_ms) and the watcher.
  void Stop(int64_t drain_ms);

  // Null without --policy-dir.
  PolicyStore* policies() const { return policies_.get(); }
  void ReloadPolicies();
  void AddStats(protocol::StatsReply* stats) const;
  // Exports the fronts' counters (the gRPC front's, once Serve started it).
  void AddMetrics(Metrics* metrics) const;
  // The policy domain of each metrics slot (PolicyStore::DomainSlotNames);
  // empty without policies.
  std::vector<std::string> DomainSlotNames() const;

 private:
  explicit Fronts(const FrontOptions& options) : options_(options) {}

  const FrontOptions options_;
  std::unique_ptr<PolicyStore> policies_;
  std::unique_ptr<RlsServer> grpc_;
};

}  // namespace tally::bin
