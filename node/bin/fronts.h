// Fronts: what tallyd serves besides its own protocol, and the policies
// they decide by: the policy directory (--policy-dir), Envoy's rate limit
// service over gRPC (--grpc-port) and the Redis protocol (--resp-port, on the
// Server's workers). tallyd_main wires them; this keeps their flags, their
// start-up order and their stats in one place.
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
#include "node/resp/resp_front.h"
#include "node/server/server.h"
#include "protocol/messages.h"

namespace tally::bin {

struct FrontOptions {
  std::string policy_dir;  // empty: no policies
  int64_t policy_poll_ms = 1'000;
  int grpc_port = -1;        // -1: no gRPC front; 0: an ephemeral port
  std::string grpc_address;  // empty: tallyd's --address
  std::string grpc_port_file;
  RlsServer::Options grpc;
  int resp_port = -1;        // -1: no RESP front; 0: an ephemeral port
  std::string resp_address;  // empty: tallyd's --address
  std::string resp_port_file;
  std::string resp_password_file;  // empty: no AUTH
  RespFront::Options resp;         // the password is read from resp_password_file
};

// The flags of the fronts, with their ranges.
void AddFrontOptions(CLI::App* app, FrontOptions* options);

class Fronts {
 public:
  // Loads the policies and the RESP password: a directory that does not load
  // or a password file that does not read is an error (the node must not
  // start). No front listens yet.
  static Status LoadPolicies(const FrontOptions& options, std::unique_ptr<Fronts>* fronts);

  // Adds the RESP front (when --resp-port is set) to `server`, before it
  // listens, on `default_address` unless --resp-address says otherwise.
  // limiter and server must outlive the fronts.
  void AddTo(Server* server, const std::string& default_address, size_t workers, Limiter* limiter);

  // Starts the policy watcher and the gRPC front (when --grpc-port is set) on
  // `default_address` unless --grpc-address says otherwise, and writes the
  // RESP port's file (the server listens by now). limiter must outlive the
  // fronts.
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

  FrontOptions options_;  // its RESP password, once read
  std::unique_ptr<PolicyStore> policies_;
  std::unique_ptr<RlsServer> grpc_;
  std::unique_ptr<RespFront> resp_;
  const Server* server_ = nullptr;  // serves resp_
};

}  // namespace tally::bin
