// TallydProcess: a real tallyd child process for integration tests.
//
// Start() runs the tallyd binary on 127.0.0.1 with --port 0 and its own
// temporary directory (port file, stderr log, and the data directory unless
// the arguments name --data-dir or --memory-only), and waits until it listens.
// The destructor always cleans up: SIGKILL if still running, reap, remove
// the directory. Every wait is bounded.
//
// Thread safety: none; owned by one test.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "node/status.h"
#include "protocol/client.h"

namespace tally::testing {

class TallydProcess {
 public:
  // extra_args are appended to the command line (e.g. {"--max-connections", "2"}).
  static Status Start(const std::vector<std::string>& extra_args,
                      std::unique_ptr<TallydProcess>* process, int start_timeout_ms = 10'000);
  ~TallydProcess();

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  Client::Options client_options() const;
  Status Connect(std::unique_ptr<Client>* client) const;

  // Sends `signal_number` and waits up to timeout_ms for the exit. Returns
  // the exit code, 128 + signal when killed by one, or -1 on timeout.
  int SignalAndWait(int signal_number, int timeout_ms);
  // The process's stderr so far (its log).
  std::string Log() const;

 private:
  TallydProcess(pid_t pid, std::string directory) : pid_(pid), directory_(std::move(directory)) {}

  pid_t pid_;
  std::string directory_;
  uint16_t port_ = 0;
  bool reaped_ = false;
};

// Runs a command (argv[0] is a path) with stdout captured; returns its exit
// code, or -1 if it could not run or did not finish within timeout_ms.
int RunCommand(const std::vector<std::string>& argv, std::string* stdout_text,
               int timeout_ms = 10'000);

}  // namespace tally::testing
