// Fronts: what tallyd serves besides its own protocol, and the policies
// they decide by: the policy directory (--policy-dir), Envoy's rate limit
// service over gRPC (--grpc-port), checks over HTTP (--http-port), the Redis
// protocol (--resp-port) and the admin endpoints (--admin-port: /healthz,
// /readyz, /metrics). The HTTP, RESP and admin fronts run on the Server's
// workers. tallyd_main wires them; this keeps their flags, their start-up
// order and their stats in one place.
//
// Thread safety: LoadPolicies, AddTo, Serve, Stop and the accessors from
// tallyd's main thread; ReloadPolicies and AddStats from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "node/common/readiness.h"
#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "node/grpc/rls_server.h"
#include "node/http/admin_front.h"
#include "node/http/check_front.h"
#include "node/metrics/metrics.h"
#include "node/policy/policy_store.h"
#include "node/resp/resp_front.h"
#include "node/server/server.h"
#include "protocol/messages.h"

namespace tally::bin {

struct FrontOptions {
  std::string policy_dir;  // empty: no policies
  int64_t policy_poll_ms = 1'000;
  bool policy_merge_domains = false;  // PolicyLoadOptions::merge_domains
  int grpc_port = -1;                 // -1: no gRPC front; 0: an ephemeral port
  std::string grpc_address;           // empty: tallyd's --address
  std::string grpc_port_file;
  RlsServer::Options grpc;
  int http_port = -1;        // -1: no HTTP front; 0: an ephemeral port
  std::string http_address;  // empty: tallyd's --address
  std::string http_port_file;
  HttpLimits http;            // of both HTTP ports
  int admin_port = -1;        // -1: no admin endpoints; 0: an ephemeral port
  std::string admin_address;  // empty: tallyd's --address
  std::string admin_port_file;
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
  // Loads the policies and the RESP password: a directory that does not load,
  // --grpc-port without --policy-dir, or a password file that does not read
  // is an error (the node must not start). No front listens yet.
  static Status LoadPolicies(const FrontOptions& options, std::unique_ptr<Fronts>* fronts);

  // Adds the HTTP and RESP fronts and the admin endpoints (when their ports
  // are set) to `server`, before it listens, on `default_address` unless
  // their own address flags say otherwise; serves the admin port at once
  // (Server::ServeEarly: /readyz answers while the node restores and
  // recovers) and writes its port file. Registers every front's counters
  // with `metrics`, which the admin port's /metrics renders. server, limiter,
  // readiness and metrics must outlive the fronts; `workers` is the server's
  // threads.
  Status AddTo(Server* server, const std::string& default_address, size_t workers, Limiter* limiter,
               const Readiness* readiness, Metrics* metrics);
  // Once the server listens: writes the HTTP and RESP port files, starts the
  // policy watcher and the gRPC front (when --grpc-port is set) on
  // `default_address` unless --grpc-address says otherwise.
  Status Serve(const std::string& default_address, Limiter* limiter);
  // Stops the gRPC front (calls in flight get drain_ms) and the watcher.
  void Stop(int64_t drain_ms);

  // Null without --policy-dir.
  PolicyStore* policies() const { return policies_.get(); }
  void ReloadPolicies();
  void AddStats(protocol::StatsReply* stats) const;
  // The policy domain of each metrics slot (PolicyStore::DomainSlotNames);
  // empty without policies.
  std::vector<std::string> DomainSlotNames() const;
  // Checks by policy rule (PolicyStore::RuleSeries); empty without policies.
  RuleSeries PolicyRuleSeries() const;

 private:
  explicit Fronts(const FrontOptions& options) : options_(options) {}

  FrontOptions options_;  // its RESP password, once read
  std::unique_ptr<PolicyStore> policies_;
  std::unique_ptr<RlsServer> grpc_;
  std::unique_ptr<CheckFront> http_;
  std::unique_ptr<AdminFront> admin_;
  std::unique_ptr<RespFront> resp_;
  const Server* server_ = nullptr;  // serves http_, admin_ and resp_
  Metrics* metrics_ = nullptr;
};

}  // namespace tally::bin
