// Fronts: what tallyd serves besides its own protocol, and the policies
// they decide by: the policy directory (--policy-dir), Envoy's rate limit
// service over gRPC (--grpc-port), checks over HTTP (--http-port) and the
// admin endpoints (--admin-port). tallyd_main wires them; this keeps their
// flags, their start-up order and their stats in one place.
//
// Thread safety: Start, Stop and the accessors from tallyd's main thread;
// ReloadPolicies and AddStats from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "node/common/readiness.h"
#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "node/grpc/rls_server.h"
#include "node/http/admin_front.h"
#include "node/http/check_front.h"
#include "node/policy/policy_store.h"
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
  int http_port = -1;        // -1: no HTTP front; 0: an ephemeral port
  std::string http_address;  // empty: tallyd's --address
  std::string http_port_file;
  HttpLimits http;            // of both HTTP ports
  int admin_port = -1;        // -1: no admin endpoints; 0: an ephemeral port
  std::string admin_address;  // empty: tallyd's --address
  std::string admin_port_file;
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
  // Adds the HTTP front and the admin endpoints (when their ports are set)
  // to `server`, on `default_address` unless their own address flags say
  // otherwise, and serves the admin port at once (Server::ServeEarly),
  // writing its port file. Before server->Listen(). limiter, readiness and
  // server must outlive the fronts' use; `workers` is the server's threads.
  Status AddHttpFronts(Server* server, const std::string& default_address, Limiter* limiter,
                       const Readiness* readiness, size_t workers);
  // Once server.Listen() succeeded: writes --http-port-file and logs the port.
  Status HttpListening(const Server& server) const;
  // Stops the gRPC front (calls in flight get drain_ms) and the watcher.
  void Stop(int64_t drain_ms);

  // Null without --policy-dir.
  PolicyStore* policies() const { return policies_.get(); }
  void ReloadPolicies();
  void AddStats(protocol::StatsReply* stats) const;

 private:
  explicit Fronts(const FrontOptions& options) : options_(options) {}

  const FrontOptions options_;
  std::unique_ptr<PolicyStore> policies_;
  std::unique_ptr<RlsServer> grpc_;
  std::unique_ptr<CheckFront> http_;
  std::unique_ptr<AdminFront> admin_;
};

}  // namespace tally::bin
