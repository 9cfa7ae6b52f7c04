// NodeProcess: a real tallyd child process, for the local cluster harness
// and the integration tests.
//
// Spawn runs the tallyd binary on 127.0.0.1 with --port 0 (and, asked to,
// --gossip-port 0), writing its port files and stderr log to a directory of
// its own, and with a data directory there too unless the arguments name
// --data-dir or --memory-only. It does not wait; WaitForPort and
// WaitForGossipPort do (a clustered node binds its gossip port first and its
// client port only after its recovery). Start is Spawn and WaitForPort.
//
// The child dies with the thread that spawned it (PR_SET_PDEATHSIG), so a
// crashed harness or test leaves no tallyd behind. The destructor always
// cleans up: SIGKILL if still running, reap, and remove the directory if the
// NodeProcess made it. Every wait is bounded.
//
// Thread safety: none; owned by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

#include "node/common/status.h"
#include "protocol/client.h"

namespace tally::cluster {

class NodeProcess {
 public:
  struct Options {
    std::string tallyd_path;
    std::vector<std::string> args;  // appended to the defaults, e.g. {"--max-connections", "2"}
    // Port files and the log; empty: a new temporary directory, removed by
    // the destructor. A given one is kept (a restart reuses it).
    std::string directory;
    bool gossip_port = false;  // also --gossip-port 0 --gossip-port-file
    // Fronts to open on ephemeral ports, by flag prefix: "grpc" adds
    // --grpc-port 0 --grpc-port-file; FrontPort("grpc") then reads it.
    std::vector<std::string> fronts;
    // Added to the environment the harness runs in, "NAME=value" each (e.g.
    // libfaketime's, for a node whose clock is off).
    std::vector<std::string> env;
    // Where tallyd listens (client and gossip ports) and is reached.
    std::string address = "127.0.0.1";
    // The gossip port with gossip_port; 0: an ephemeral one.
    uint16_t gossip_port_number = 0;
    // Runs tallyd under this command, e.g. {"ip", "netns", "exec", NAME}.
    std::vector<std::string> exec_prefix;
  };

  static Status Spawn(const Options& options, std::unique_ptr<NodeProcess>* process);
  static Status Start(const Options& options, std::unique_ptr<NodeProcess>* process,
                      int start_timeout_ms = 10'000);
  ~NodeProcess();
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  // Wait until tallyd has written its client (or gossip) port file.
  // Unavailable when it exits first or the time runs out.
  Status WaitForPort(int timeout_ms);
  Status WaitForGossipPort(int timeout_ms);

  // The port a front (Options::fronts) listens on, once tallyd has written it.
  Status FrontPort(const std::string& front, int timeout_ms, uint16_t* port);

  uint16_t port() const { return port_; }
  uint16_t gossip_port() const { return gossip_port_; }
  pid_t pid() const { return pid_; }
  bool running() const { return !reaped_; }
  protocol::Client::Options client_options() const;
  Status Connect(std::unique_ptr<protocol::Client>* client) const;

  // Sends `signal_number` and waits up to timeout_ms for the exit. Returns
  // the exit code, 128 + signal when killed by one, or -1 on timeout.
  int SignalAndWait(int signal_number, int timeout_ms);
  // The process's stderr so far (its log).
  std::string Log() const;

 private:
  NodeProcess(pid_t pid, std::string directory, bool owns_directory, std::string address)
      : pid_(pid),
        directory_(std::move(directory)),
        owns_directory_(owns_directory),
        address_(std::move(address)) {}
  Status WaitForFile(const std::string& name, int timeout_ms, uint16_t* port);

  pid_t pid_;
  std::string directory_;
  bool owns_directory_;
  const std::string address_;
  uint16_t port_ = 0;
  uint16_t gossip_port_ = 0;
  bool reaped_ = false;
};

// Runs a command (argv[0] is a path) with stdout captured; returns its exit
// code, or -1 if it could not run or did not finish within timeout_ms.
int RunCommand(const std::vector<std::string>& argv, std::string* stdout_text,
               int timeout_ms = 10'000);

}  // namespace tally::cluster
