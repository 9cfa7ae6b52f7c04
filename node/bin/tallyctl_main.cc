// tallyctl: talk to a tallyd from a shell. The target is --addr host:port,
// or TALLY_ADDR, or --host/--port (default 127.0.0.1:7420). Every global
// option may come from TALLY_<NAME> (TALLY_JSON=1, TALLY_TIMEOUT_MS=500).
//
//   tallyctl check KEY [--algorithm A] --limit N --window-ms W [--cost C]
//   tallyctl peek KEY [--algorithm A] --limit N --window-ms W
//   tallyctl policy DOMAIN --descriptor k=v[,k=v...] [--descriptor ...] [--hits N]
//   tallyctl inspect KEY [--algorithm A] --window-ms W [--addr H:P ...]
//   tallyctl reset KEY [--algorithm A] --window-ms W [--local]
//   tallyctl stats
//   tallyctl cluster        (members as the node sees them, links, peers)
//   tallyctl members forget ID   (a member gone for good: every node drops it)
//
// TLS (a node started with --client-tls on): --tls, or --ca-file F; the
// node's certificate is verified against F (else the system's CAs) and
// --server-name (else the host); --cert-file and --key-file present a
// client certificate.
//
// Every command takes --json. Arguments are checked before connecting.
// Exit status: 0 allowed (or stats printed), 1 denied, 2 error of any kind
// (bad flags, no connection, or an error for the check).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "node/bin/cli_checks.h"
#include "node/bin/tallyctl_limits.h"
#include "node/common/host_port.h"
#include "node/common/limit.h"
#include "node/common/version.h"
#include "protocol/client.h"

namespace {

constexpr int kExitAllowed = 0;
constexpr int kExitDenied = 1;
constexpr int kExitError = 2;

using Json = nlohmann::ordered_json;

// One JSON object a line. Keys and messages are bytes a caller chose: what is
// not UTF-8 is replaced rather than refused.
void PrintJson(const Json& value) {
  std::printf("%s\n", value.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

int PrintError(bool json, std::string_view code, std::string_view message) {
  if (json) {
    PrintJson(Json{{"error", code}, {"message", message}});
  } else {
    std::fprintf(stderr, "tallyctl: %.*s: %.*s\n", static_cast<int>(code.size()), code.data(),
                 static_cast<int>(message.size()), message.data());
  }
  return kExitError;
}

// Client::Connect's failure: a TLS file that does not load is invalid_argument,
// anything else (no node, a certificate that does not verify) unavailable.
int PrintConnectError(bool json, std::string_view where, const tally::Status& status) {
  const bool bad_file = status.code() == tally::Status::Code::kInvalidArgument;
  return PrintError(json, bad_file ? "invalid_argument" : "unavailable",
                    std::string(where) + std::string(status.message()));
}

Json DecisionJson(const tally::Decision& d) {
  return Json{{"allowed", d.allowed},
              {"never_allowed", d.never_allowed},
              {"limit", d.limit},
              {"remaining", d.remaining},
              {"reset_after_ms", d.reset_after_ms},
              {"retry_after_ms", d.retry_after_ms}};
}

int PrintDecision(bool json, const tally::Decision& d) {
  if (json) {
    PrintJson(DecisionJson(d));
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
      {"storage_disk_bytes", s.storage_disk_bytes},
      {"storage_degraded", s.storage_degraded ? 1u : 0u},
      {"shadow_denied", s.shadow_denied},
      {"policy_domains", s.policy_domains},
      {"policy_rules", s.policy_rules},
      {"policy_reloads", s.policy_reloads},
      {"policy_reload_failures", s.policy_reload_failures},
      {"grpc_requests", s.grpc_requests},
      {"grpc_over_limit", s.grpc_over_limit},
      {"grpc_refused", s.grpc_refused},
      {"resp_commands", s.resp_commands},
      {"resp_throttled", s.resp_throttled},
      {"resp_errors", s.resp_errors},
      {"http_requests", s.http_requests},
      {"http_allowed", s.http_allowed},
      {"http_denied", s.http_denied},
      {"http_refused", s.http_refused},
      {"recovery_ms", s.recovery_ms},
      {"recovery_peers_synced", s.recovery_peers_synced},
      {"gossip_rounds", s.gossip_rounds},
      {"gossip_bytes_sent", s.gossip_bytes_sent},
      {"gossip_bytes_received", s.gossip_bytes_received},
      {"gossip_delta_bytes_sent", s.gossip_delta_bytes_sent},
      {"gossip_delta_entries_sent", s.gossip_delta_entries_sent},
      {"gossip_full_syncs_sent", s.gossip_full_syncs_sent},
      {"gossip_full_syncs_received", s.gossip_full_syncs_received},
      {"gossip_entries_merged", s.gossip_entries_merged},
      {"gossip_entries_rejected", s.gossip_entries_rejected},
      {"gossip_sessions_refused", s.gossip_sessions_refused},
      {"gossip_digests_sent", s.gossip_digests_sent},
      {"gossip_ranges_sent", s.gossip_ranges_sent}};
  if (json) {
    Json out = Json::object();
    for (const auto& [name, value] : fields) out[name] = value;
    PrintJson(out);
    return kExitAllowed;
  }
  for (const auto& [name, value] : fields) {
    std::printf("%s %llu\n", name, static_cast<unsigned long long>(value));
  }
  return kExitAllowed;
}

// This node's view of the members, the gossip links it dials and the peers
// whose state it receives.
int PrintCluster(bool json, const tally::protocol::StatsReply& s) {
  using ull = unsigned long long;
  using tally::protocol::MemberStateName;
  if (json) {
    Json members = Json::array(), links = Json::array(), peers = Json::array();
    for (const tally::protocol::MemberStatus& m : s.members) {
      members.push_back(Json{
          {"node_id", m.node_id},
          {"address", m.address},
          {"state", MemberStateName(m.state)},
          {"incarnation", m.incarnation},
          {"heartbeat", m.heartbeat},
          {"last_heard_ms_ago", m.last_heard_ms_ago},
          {"lag_ms", m.lag_ms},
          {"clock_offset_ms", m.clock_offset_known ? Json(m.clock_offset_ms) : Json(nullptr)}});
    }
    for (const tally::protocol::PeerLinkStatus& l : s.peer_links) {
      links.push_back(Json{{"address", l.address},
                           {"up", l.up},
                           {"node_id", l.node_id},
                           {"bytes_sent", l.bytes_sent},
                           {"queued_bytes", l.queued_bytes},
                           {"full_syncs_sent", l.full_syncs_sent},
                           {"connects", l.connects},
                           {"lag_ms", l.lag_ms}});
    }
    for (const tally::protocol::PeerNodeStatus& n : s.peer_nodes) {
      peers.push_back(Json{{"node_id", n.node_id},
                           {"connected", n.connected},
                           {"last_heard_ms_ago", n.last_heard_ms_ago},
                           {"full_syncs", n.full_syncs},
                           {"entries_merged", n.entries_merged}});
    }
    PrintJson(Json{{"members", members}, {"links", links}, {"peers", peers}});
    return kExitAllowed;
  }
  std::printf("members (this node's view):\n%-20s %-24s %-8s %14s %8s %10s %15s\n", "node",
              "address", "state", "last_heard_ms", "lag_ms", "heartbeat", "clock_offset_ms");
  for (const tally::protocol::MemberStatus& member : s.members) {
    const std::string offset =
        member.clock_offset_known ? std::to_string(member.clock_offset_ms) : "-";
    std::printf("%-20llu %-24s %-8s %14llu %8lld %10llu %15s\n", ull(member.node_id),
                member.address.c_str(), std::string(MemberStateName(member.state)).c_str(),
                ull(member.last_heard_ms_ago), static_cast<long long>(member.lag_ms),
                ull(member.heartbeat), offset.c_str());
  }
  std::printf("links (this node's state to):\n%-24s %-5s %-20s %12s %10s %6s %8s\n", "address",
              "up", "node", "bytes_sent", "queued", "syncs", "connects");
  for (const tally::protocol::PeerLinkStatus& link : s.peer_links) {
    std::printf("%-24s %-5s %-20llu %12llu %10llu %6llu %8llu\n", link.address.c_str(),
                link.up ? "yes" : "no", ull(link.node_id), ull(link.bytes_sent),
                ull(link.queued_bytes), ull(link.full_syncs_sent), ull(link.connects));
  }
  std::printf("peers (their state from):\n%-20s %-9s %14s %6s %14s\n", "node", "connected",
              "last_heard_ms", "syncs", "merged");
  for (const tally::protocol::PeerNodeStatus& node : s.peer_nodes) {
    std::printf("%-20llu %-9s %14llu %6llu %14llu\n", ull(node.node_id),
                node.connected ? "yes" : "no", ull(node.last_heard_ms_ago), ull(node.full_syncs),
                ull(node.entries_merged));
  }
  return kExitAllowed;
}

// "k=v,k=v" into *entries; false when a part has no '=' or an empty key.
bool ParseDescriptor(const std::string& text, std::vector<std::string>* storage,
                     std::vector<uint32_t>* sizes) {
  uint32_t count = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string part = text.substr(start, comma - start);
    const size_t equals = part.find('=');
    if (equals == std::string::npos || equals == 0) return false;
    storage->push_back(part.substr(0, equals));
    storage->push_back(part.substr(equals + 1));
    ++count;
    start = comma + 1;
  }
  sizes->push_back(count);
  return true;
}

// One line a descriptor (or one JSON object); exit 1 when any was denied.
int PrintPolicyOutcomes(bool json, const std::vector<tally::protocol::PolicyOutcome>& outcomes) {
  using Kind = tally::protocol::PolicyOutcome::Kind;
  bool denied = false;
  Json descriptors = Json::array();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const tally::protocol::PolicyOutcome& o = outcomes[i];
    const bool error = o.error != tally::protocol::ErrorCode::kOk;
    const bool allowed = o.kind != Kind::kLimited ||
                         (!error && (o.decision.allowed || o.shadow_denied || o.quota_exceeded));
    denied = denied || !allowed;
    const char* kind = o.kind == Kind::kNoLimit     ? "no_limit"
                       : o.kind == Kind::kUnlimited ? "unlimited"
                                                    : "limited";
    const std::string_view error_name = tally::protocol::ErrorCodeName(o.error);
    if (json) {
      Json descriptor = {{"kind", kind},
                         {"rule", o.rule},
                         {"allowed", allowed},
                         {"shadow_denied", o.shadow_denied},
                         {"quota_exceeded", o.quota_exceeded}};
      if (o.kind == Kind::kLimited && !error) descriptor["decision"] = DecisionJson(o.decision);
      if (error) {
        descriptor["error"] = error_name;
        descriptor["message"] = o.error_message;
      }
      descriptors.push_back(std::move(descriptor));
    } else if (o.kind != Kind::kLimited) {
      std::printf("descriptor %zu: allowed (%s%s%s)\n", i, kind, o.rule.empty() ? "" : " by ",
                  o.rule.c_str());
    } else if (error) {
      std::printf("descriptor %zu: %s: %s\n", i, std::string(error_name).c_str(),
                  o.error_message.c_str());
    } else {
      std::printf(
          "descriptor %zu: %s by %s: limit=%llu remaining=%llu reset_after_ms=%llu "
          "retry_after_ms=%llu\n",
          i,
          o.shadow_denied    ? "allowed (shadow mode; would be denied)"
          : o.quota_exceeded ? "allowed (quota mode; over its limit)"
          : allowed          ? "allowed"
                             : "denied",
          o.rule.c_str(), static_cast<unsigned long long>(o.decision.limit),
          static_cast<unsigned long long>(o.decision.remaining),
          static_cast<unsigned long long>(o.decision.reset_after_ms),
          static_cast<unsigned long long>(o.decision.retry_after_ms));
    }
  }
  if (json) PrintJson(Json{{"descriptors", descriptors}, {"allowed", !denied}});
  return denied ? kExitDenied : kExitAllowed;
}

// Asks the target, or each of `addrs`, for the limit's state and prints each
// answer; exit 2 when any could not be asked (the others are printed).
int Inspect(tally::protocol::Client::Options target, const std::vector<std::string>& addrs,
            const tally::protocol::KeyLimit& limit, bool json) {
  std::vector<tally::protocol::Client::Options> targets;
  for (const std::string& addr : addrs) {
    tally::HostPort parsed;
    if (tally::Status status = tally::ParseHostPort(addr, &parsed); !status.ok()) {
      return PrintError(json, "invalid_argument", "--addr: " + std::string(status.message()));
    }
    target.host = parsed.host;
    target.port = parsed.port;
    targets.push_back(target);
  }
  if (targets.empty()) targets.push_back(target);
  int exit_code = kExitAllowed;
  for (const tally::protocol::Client::Options& node : targets) {
    const std::string where = node.host + ":" + std::to_string(node.port);
    std::unique_ptr<tally::protocol::Client> client;
    tally::protocol::InspectReply reply;
    if (tally::Status status = tally::protocol::Client::Connect(node, &client); !status.ok()) {
      exit_code = PrintConnectError(json, where + ": ", status);
    } else if (status = client->Inspect(limit, &reply); !status.ok()) {
      exit_code = PrintError(json, "error", where + ": " + status.ToString());
    } else if (json) {
      PrintJson(tally::bin::InspectJson(where, limit, reply));
    } else {
      const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
      std::fputs(tally::bin::InspectText(where, limit, reply, now_ms).c_str(), stdout);
    }
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  tally::protocol::Client::Options options;
  options.port = 7420;
  bool json = false;
  std::string addr;
  std::string key;
  std::string algorithm_name = "sliding_counter";
  tally::LimitSpec spec;
  uint64_t cost = 1;

  CLI::App app("tallyctl: query a tallyd");
  app.set_version_flag("--version", tally::VersionLine("tallyctl"));
  app.require_subcommand(1);
  app.add_option("--addr", addr, "tallyd as host:port; --host and --port override its parts")
      ->check(tally::bin::HostPortCheck());
  CLI::Option* host_option =
      app.add_option("--host", options.host, "tallyd address")->capture_default_str();
  CLI::Option* port_option =
      app.add_option("--port", options.port, "tallyd port")->capture_default_str();
  app.add_option("--timeout-ms", options.timeout_ms, "Give up after this long")
      ->check(tally::bin::InRange(1, 3'600'000))
      ->capture_default_str();
  app.add_flag("--json", json, "Print JSON instead of text");
  tally::protocol::Client::Options::Tls& tls = options.tls;
  app.add_flag("--tls", tls.enabled,
               "Speak TLS, to a node started with --client-tls on; its certificate must chain "
               "to the system's CAs, or to --ca-file");
  app.add_option("--ca-file", tls.ca_file,
                 "PEM: the CA the node's certificate must chain to (implies --tls)")
      ->check(CLI::ExistingFile);
  app.add_option("--cert-file", tls.cert_file,
                 "PEM: a client certificate, for a node that asks for one (--client-tls-verify)")
      ->check(CLI::ExistingFile);
  app.add_option("--key-file", tls.key_file, "PEM: the client certificate's key")
      ->check(CLI::ExistingFile);
  app.add_option("--server-name", tls.server_name,
                 "The name the node's certificate must carry (default: the host)");
  // A limit is (key, algorithm, window_ms): what inspect and reset name.
  const auto add_key_limit = [&](CLI::App* command) {
    command->add_option("key", key, "The key to limit, e.g. user:42")->required();
    command
        ->add_option("--algorithm", algorithm_name,
                     "fixed_window, sliding_log, sliding_counter or token_bucket")
        ->capture_default_str();
    command->add_option("--window-ms", spec.window_ms, "Window length (bucket: time to refill)")
        ->required();
  };
  // check and peek take the same limit; neither has a default: a forgotten
  // flag must not consume quota under a limit nobody chose.
  const auto add_limit = [&](CLI::App* command) {
    add_key_limit(command);
    command->add_option("--limit", spec.limit, "Requests per window (bucket: capacity)")
        ->required();
  };
  CLI::App* check = app.add_subcommand("check", "Check (and consume) one request against a limit");
  add_limit(check);
  check->add_option("--cost", cost, "Units this request consumes; 0 peeks")->capture_default_str();
  CLI::App* peek =
      app.add_subcommand("peek", "What a request of cost 1 would get now; consumes nothing");
  add_limit(peek);
  std::string domain;
  std::vector<std::string> descriptor_texts;
  uint64_t hits = 0;
  CLI::App* policy = app.add_subcommand(
      "policy", "Check one request by domain and descriptors under the node's policies");
  policy->add_option("domain", domain, "The policy domain")->required();
  policy
      ->add_option("--descriptor", descriptor_texts,
                   "Entries key=value[,key=value...]; repeat for more descriptors")
      ->required();
  policy->add_option("--hits", hits, "The cost of each descriptor (0 counts as 1)")
      ->capture_default_str();
  std::vector<std::string> inspect_addrs;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "Print one limit of a key as the node holds it: every node's counts in it");
  add_key_limit(inspect);
  inspect
      ->add_option("--addr", inspect_addrs,
                   "Ask these nodes instead (host:port; repeat, or separate with commas)")
      ->delimiter(',')
      ->allow_extra_args(false)  // one value per --addr: the key after it is no address
      ->check(tally::bin::HostPortCheck());
  bool reset_local = false;
  CLI::App* reset = app.add_subcommand(
      "reset", "Forget one limit of a key on the node; a clustered node refuses without --local");
  add_key_limit(reset);
  reset->add_flag("--local", reset_local,
                  "On a clustered node, forget this node's copy anyway: the peers send back "
                  "what they hold at this node's next full sync (docs/design-persistence.md)");
  CLI::App* stats = app.add_subcommand("stats", "Print the node's counters");
  CLI::App* cluster = app.add_subcommand("cluster",
                                         "Print the members as the node sees them (state, last "
                                         "heard, lag), its gossip links and peers");
  CLI::App* members = app.add_subcommand("members", "Change the cluster's membership");
  members->require_subcommand(1);
  uint64_t forget_id = 0;
  CLI::App* forget = members->add_subcommand(
      "forget",
      "Tell the cluster that member ID is gone for good: every node stops dialling it and no "
      "longer counts it; what it kept back counts as lost (docs/operations.md)");
  forget->add_option("id", forget_id, "The member's node id (tallyctl cluster lists them)")
      ->required()
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  tally::bin::AddEnvironmentNames(&app, "TALLY_");  // TALLY_ADDR, TALLY_TIMEOUT_MS, ...
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string source = tally::bin::EnvironmentSource(app, e, argc, argv);
        !source.empty()) {
      return PrintError(false, "invalid_argument", source + ": " + e.what());
    }
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitError;
  }

  // Everything is validated before connecting: a typo is invalid_argument
  // whether or not a node is up.
  if (!addr.empty()) {
    tally::HostPort target;
    if (tally::Status status = tally::ParseHostPort(addr, &target); !status.ok()) {
      return PrintError(json, "invalid_argument", "--addr: " + std::string(status.message()));
    }
    if (host_option->count() == 0) options.host = target.host;
    if (port_option->count() == 0) options.port = target.port;
  }
  if (!tls.ca_file.empty()) tls.enabled = true;
  if (!tls.enabled &&
      (!tls.cert_file.empty() || !tls.key_file.empty() || !tls.server_name.empty())) {
    return PrintError(json, "invalid_argument",
                      "--cert-file, --key-file and --server-name need --tls or --ca-file");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return PrintError(json, "invalid_argument", "--cert-file and --key-file go together");
  }
  if (check->parsed() || peek->parsed() || inspect->parsed() || reset->parsed()) {
    const std::optional<tally::Algorithm> algorithm = tally::ParseAlgorithm(algorithm_name);
    if (!algorithm) {
      return PrintError(json, "invalid_argument", "unknown algorithm " + algorithm_name);
    }
    spec.algorithm = *algorithm;
    for (const tally::Status& status : {tally::ValidateKey(key), tally::ValidateSpec(spec)}) {
      if (!status.ok()) return PrintError(json, "invalid_argument", status.message());
    }
    if (peek->parsed()) cost = 0;
  }
  std::vector<std::string> entry_storage;  // keys and values, alternating; the views point here
  tally::protocol::PolicyCheck policy_check;
  for (const std::string& text : descriptor_texts) {
    if (!ParseDescriptor(text, &entry_storage, &policy_check.descriptor_sizes)) {
      return PrintError(json, "invalid_argument",
                        "--descriptor '" + text + "' is not key=value[,key=value...]");
    }
  }
  for (size_t i = 0; i < entry_storage.size(); i += 2) {
    policy_check.entries.push_back({entry_storage[i], entry_storage[i + 1]});
  }
  policy_check.domain = domain;
  policy_check.hits = hits;

  const tally::protocol::KeyLimit key_limit{key, spec, reset_local};
  if (inspect->parsed()) return Inspect(options, inspect_addrs, key_limit, json);

  std::unique_ptr<tally::protocol::Client> client;
  if (tally::Status status = tally::protocol::Client::Connect(options, &client); !status.ok()) {
    return PrintConnectError(json, "", status);
  }
  if (stats->parsed() || cluster->parsed()) {
    tally::protocol::StatsReply reply;
    if (tally::Status status = client->Stats(&reply); !status.ok()) {
      return PrintError(json, "error", status.ToString());
    }
    return stats->parsed() ? PrintStats(json, reply) : PrintCluster(json, reply);
  }
  if (forget->parsed()) {
    bool forgotten = false;
    if (tally::Status status = client->ForgetMember(forget_id, &forgotten); !status.ok()) {
      return PrintError(json, "error", status.ToString());
    }
    if (json) {
      PrintJson(Json{{"forgotten", forgotten}});
    } else {
      std::printf("%s\n", forgotten ? "forgotten: every node drops this member"
                                    : "not counted already: it had left or was forgotten");
    }
    return kExitAllowed;
  }
  if (reset->parsed()) {
    bool erased = false;
    if (tally::Status status = client->Reset(key_limit, &erased); !status.ok()) {
      return PrintError(json, "error", status.ToString());
    }
    if (json) {
      PrintJson(Json{{"erased", erased}});
    } else {
      std::printf("%s\n", erased ? "reset: the node forgot this limit's state"
                                 : "reset: the node held nothing for this limit");
    }
    return kExitAllowed;
  }
  if (policy->parsed()) {
    std::vector<tally::protocol::PolicyOutcome> outcomes;
    if (tally::Status status = client->CheckPolicy(policy_check, &outcomes); !status.ok()) {
      return PrintError(json, "error", status.ToString());
    }
    return PrintPolicyOutcomes(json, outcomes);
  }
  tally::protocol::CheckOutcome outcome;
  if (tally::Status status = client->Check({key, spec, cost}, &outcome); !status.ok()) {
    return PrintError(json, "error", status.ToString());
  }
  if (outcome.error != tally::protocol::ErrorCode::kOk) {
    return PrintError(json, tally::protocol::ErrorCodeName(outcome.error), outcome.error_message);
  }
  return PrintDecision(json, outcome.decision);
}
