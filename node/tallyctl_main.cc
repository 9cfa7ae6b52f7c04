// tallyctl: talk to a tallyd from a shell.
//
//   tallyctl [--host H] [--port P] [--json] check KEY [--algorithm A] [--limit N] [--window-ms W] [--cost C]
//   tallyctl [--host H] [--port P] [--json] stats
//
// Exit status: 0 allowed (or stats printed), 1 denied, 2 error of any kind
// (bad flags, no connection, or an error for the check).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "node/json.h"
#include "node/limit.h"
#include "protocol/client.h"

namespace {

constexpr int kExitAllowed = 0;
constexpr int kExitDenied = 1;
constexpr int kExitError = 2;

int PrintError(bool json, std::string_view code, std::string_view message) {
  if (json) {
    std::printf("{\"error\":%s,\"message\":%s}\n", tally::JsonString(code).c_str(),
                tally::JsonString(message).c_str());
  } else {
    std::fprintf(stderr, "tallyctl: %.*s: %.*s\n", static_cast<int>(code.size()), code.data(),
                 static_cast<int>(message.size()), message.data());
  }
  return kExitError;
}

int PrintDecision(bool json, const tally::Decision& d) {
  if (json) {
    std::printf(
        "{\"allowed\":%s,\"never_allowed\":%s,\"limit\":%llu,\"remaining\":%llu,"
        "\"reset_after_ms\":%llu,\"retry_after_ms\":%llu}\n",
        d.allowed ? "true" : "false", d.never_allowed ? "true" : "false",
        static_cast<unsigned long long>(d.limit), static_cast<unsigned long long>(d.remaining),
        static_cast<unsigned long long>(d.reset_after_ms),
        static_cast<unsigned long long>(d.retry_after_ms));
  } else {
    std::printf("%s limit=%llu remaining=%llu reset_after_ms=%llu retry_after_ms=%llu%s\n",
                d.allowed ? "allowed" : "denied", static_cast<unsigned long long>(d.limit),
                static_cast<unsigned long long>(d.remaining),
                static_cast<unsigned long long>(d.reset_after_ms),
                static_cast<unsigned long long>(d.retry_after_ms),
                d.never_allowed ? " (cost exceeds the limit: never allowed)" : "");
  }
  return d.allowed ? kExitAllowed : kExitDenied;
}

int PrintStats(bool json, const tally::protocol::StatsReply& s) {
  const std::pair<const char*, uint64_t> fields[] = {
      {"uptime_ms", s.uptime_ms},
      {"keys", s.keys},
      {"checks", s.checks},
      {"allowed", s.allowed},
      {"denied", s.denied},
      {"errors", s.errors},
      {"connections_open", s.connections_open},
      {"connections_total", s.connections_total},
      {"restore_ms", s.restore_ms},
      {"keys_restored", s.keys_restored},
      {"storage_flushes", s.storage_flushes},
      {"storage_checkpoints", s.storage_checkpoints},
      {"storage_keys_written", s.storage_keys_written},
      {"storage_write_errors", s.storage_write_errors},
      {"storage_disk_bytes", s.storage_disk_bytes}};
  const char* separator = json ? "{" : "";
  for (const auto& [name, value] : fields) {
    std::printf(json ? "%s\"%s\":%llu" : "%s%s %llu\n", separator, name,
                static_cast<unsigned long long>(value));
    separator = json ? "," : "";
  }
  if (json) std::printf("}\n");
  return kExitAllowed;
}

}  // namespace

int main(int argc, char** argv) {
  tally::Client::Options options;
  options.port = 7420;
  bool json = false;
  std::string key;
  std::string algorithm_name = "sliding_counter";
  tally::LimitSpec spec{tally::Algorithm::kSlidingWindowCounter, 100, 60'000};
  uint64_t cost = 1;

  CLI::App app("tallyctl: query a tallyd");
  app.require_subcommand(1);
  app.add_option("--host", options.host, "tallyd address")->capture_default_str();
  app.add_option("--port", options.port, "tallyd port")->capture_default_str();
  app.add_option("--timeout-ms", options.timeout_ms, "Give up after this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", json, "Print JSON instead of text");
  CLI::App* check = app.add_subcommand("check", "Check (and consume) one request against a limit");
  check->add_option("key", key, "The key to limit, e.g. user:42")->required();
  check->add_option("--algorithm", algorithm_name,
                    "fixed_window, sliding_log, sliding_counter or token_bucket")
      ->capture_default_str();
  check->add_option("--limit", spec.limit, "Requests per window (bucket: capacity)")
      ->capture_default_str();
  check->add_option("--window-ms", spec.window_ms, "Window length (bucket: time to refill)")
      ->capture_default_str();
  check->add_option("--cost", cost, "Units this request consumes; 0 peeks")->capture_default_str();
  CLI::App* stats = app.add_subcommand("stats", "Print the node's counters");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitError;
  }

  std::unique_ptr<tally::Client> client;
  if (tally::Status status = tally::Client::Connect(options, &client); !status.ok()) {
    return PrintError(json, "unavailable", status.message());
  }
  if (stats->parsed()) {
    tally::protocol::StatsReply reply;
    if (tally::Status status = client->Stats(&reply); !status.ok()) {
      return PrintError(json, "error", status.ToString());
    }
    return PrintStats(json, reply);
  }
  const std::optional<tally::Algorithm> algorithm = tally::ParseAlgorithm(algorithm_name);
  if (!algorithm) return PrintError(json, "invalid_argument", "unknown algorithm " + algorithm_name);
  spec.algorithm = *algorithm;
  tally::protocol::CheckOutcome outcome;
  if (tally::Status status = client->Check({key, spec, cost}, &outcome); !status.ok()) {
    return PrintError(json, "error", status.ToString());
  }
  if (outcome.error != tally::protocol::ErrorCode::kOk) {
    return PrintError(json, tally::protocol::ErrorCodeName(outcome.error), outcome.error_message);
  }
  return PrintDecision(json, outcome.decision);
}
