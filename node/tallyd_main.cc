// tallyd: the tally daemon. Serves the protocol (node/server.h) over TCP.
//
// Options come from flags and, optionally, a TOML file (--config) whose keys
// are the long flag names without dashes' prefix, e.g. `port = 7420`; flags
// given on the command line override the file.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "node/clock.h"
#include "node/limiter.h"
#include "node/server.h"

namespace {

// Writes the bound port to `path` atomically, so a reader never sees half a number.
bool WritePortFile(const std::string& path, uint16_t port) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << port << "\n";
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  tally::Server::Options server;
  tally::Limiter::Options limiter_options;
  std::string port_file;
  std::string log_level = "info";

  CLI::App app("tallyd: a distributed rate limiter node");
  app.set_config("--config", "", "Read options from a TOML file (flags override it)");
  app.add_option("--address", server.address, "Address to listen on")->capture_default_str();
  app.add_option("--port", server.port, "TCP port to listen on; 0 picks a free one")
      ->capture_default_str();
  app.add_option("--port-file", port_file,
                 "Write the bound port to this file once listening (for --port 0)");
  app.add_option("--threads", server.threads, "Worker threads serving connections")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-connections", server.max_connections,
                 "Connections beyond this get an error and are closed")
      ->check(CLI::Range(size_t{1}, size_t{1'000'000}))
      ->capture_default_str();
  app.add_option("--max-frame-bytes", server.limits.max_frame_bytes,
                 "Largest request frame accepted; larger ones close the connection")
      ->check(CLI::Range(size_t{64}, size_t{64} << 20))
      ->capture_default_str();
  app.add_option("--max-checks-per-request", server.limits.max_checks_per_request,
                 "Most checks in one request; more closes the connection")
      ->check(CLI::Range(size_t{1}, size_t{1'000'000}))
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", server.idle_timeout_ms,
                 "Close a connection that sends nothing for this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--write-timeout-ms", server.write_timeout_ms,
                 "Close a connection that does not take a response for this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--drain-timeout-ms", server.drain_timeout_ms,
                 "At shutdown, wait this long for in-flight requests")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--sweep-interval-ms", server.sweep_interval_ms,
                 "Free expired keys this often; 0 disables the periodic sweep")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-keys", limiter_options.max_keys,
                 "Most keys held; a check that needs a new key beyond it gets resource_exhausted")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--node-id", limiter_options.node_id, "This node's id (its G-counter slot)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto logger = spdlog::stderr_color_mt("tallyd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));

  tally::Limiter limiter(limiter_options);
  tally::Server daemon(server, &limiter, tally::SystemClock::Default());
  if (tally::Status status = daemon.Listen(); !status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  if (!port_file.empty() && !WritePortFile(port_file, daemon.port())) {
    spdlog::error("cannot write port file {}", port_file);
    return 1;
  }
  daemon.Run();
  return 0;
}
