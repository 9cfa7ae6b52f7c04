// tallyd: the tally daemon. Serves the protocol (node/server/server.h) over TCP.
//
// Options come from flags, environment variables (TALLY_MAX_KEYS for
// --max-keys) and, optionally, a TOML file (--config) whose keys are the long
// flag names without dashes' prefix, e.g. `port = 7420`; flags override the
// environment, which overrides the file (node/bin/tallyd_options.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "node/bin/cli_checks.h"
#include "node/bin/fronts.h"
#include "node/bin/help_format.h"
#include "node/bin/log_format.h"
#include "node/bin/startup_progress.h"
#include "node/bin/tallyd_options.h"
#include "node/bin/tls_options.h"
#include "node/common/clock.h"
#include "node/common/readiness.h"
#include "node/engine/limiter.h"
#include "node/gossip/gossip.h"
#include "node/metrics/metrics.h"
#include "node/persist/persister.h"
#include "node/server/server.h"
#include "protocol/peer_auth.h"
#include "storage/store.h"

namespace {

// On a clean stop, how long the node waits for its leave to reach the peers.
constexpr int64_t kLeaveTimeoutMs = 1'000;

// Upper bounds of flags in ms: longer timeouts and intervals are mistakes.
using tally::bin::kDayMs;
using tally::bin::kHourMs;

// The most --max-keys: the key table's handles are 32 bits, and 10^9 keys
// take about 60 GB already.
constexpr int64_t kMostKeys = 1'000'000'000;

// tallyd's sections: each option's CLI11 group, in the order --help and
// docs/configuration.md list them (node/bin/help_format.h).
constexpr char kClientPorts[] = "Client ports";
constexpr char kKeys[] = "Keys";
constexpr char kCluster[] = "Cluster";
constexpr char kStorage[] = "Storage";
constexpr char kFronts[] = "Fronts";
constexpr char kTls[] = "TLS";
constexpr char kLogging[] = "Logging";
constexpr char kOther[] = "Other";

}  // namespace

int main(int argc, char** argv) {
  tally::Server::Options server;
  tally::Limiter::Options limiter_options;
  limiter_options.node_id = 0;  // from the data directory, or random
  std::string data_dir = "tally-data";
  bool memory_only = false;
  bool sync = false;
  bool salvage_wal = false;
  tally::Persister::Options persister_options;
  std::string port_file;
  std::string log_level = "info";
  tally::Gossip::Options gossip_options;
  std::string gossip_address;  // default: --address
  std::string gossip_port_file;
  std::string cluster_secret_file;
  int64_t recovery_timeout_ms = 3'000;
  bool escrow = false;
  bool plain_gossip = false;
  std::string partition_mode = "fail-open";
  int64_t escrow_epoch_ms = 200;

  spdlog::set_default_logger(spdlog::stderr_color_mt("tallyd"));  // refusals are logged too
  CLI::App app("tallyd: a distributed rate limiter node");
  // Options added after section(name) go to that section.
  const auto section = [&app](const char* name) { app.option_defaults()->group(name); };
  app.get_help_ptr()->group(kOther);
  section(kOther);
  app.set_version_flag("--version", tally::bin::VersionText());
  section(kLogging);
  tally::bin::AddLogFormatOption(&app);  // first: later refusals are logged in its format
  section(kOther);
  tally::bin::AddConfigOption(&app);
  tally::bin::AddHelpFormats(
      &app, {kClientPorts, kKeys, kCluster, kStorage, kFronts, kTls, kLogging, kOther});
  section(kFronts);
  tally::bin::FrontOptions front_options;
  tally::bin::AddFrontOptions(&app, &front_options);
  section(kTls);
  tally::bin::TlsOptions tls_options;
  tally::bin::AddTlsOptions(&app, &tls_options);
  section(kClientPorts);
  app.add_option("--address", server.address, "Address to listen on")->capture_default_str();
  app.add_option("--port", server.port, "TCP port to listen on; 0 picks a free one")
      ->check(tally::bin::InRange(0, 65'535))
      ->capture_default_str();
  app.add_option("--port-file", port_file,
                 "Write the bound port to this file once listening (for --port 0)");
  app.add_option("--threads", server.threads, "Worker threads serving connections")
      ->check(tally::bin::InRange(1, 256))
      ->capture_default_str();
  app.add_option("--max-connections", server.max_connections,
                 "Connections beyond this get an error and are closed")
      ->check(tally::bin::InRange(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--max-frame-bytes", server.limits.max_frame_bytes,
                 "Largest request frame accepted; larger ones close the connection")
      ->check(tally::bin::InRange(64, int64_t{64} << 20))
      ->capture_default_str();
  app.add_option("--max-checks-per-request", server.limits.max_checks_per_request,
                 "Most checks in one request; more closes the connection")
      ->check(tally::bin::InRange(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", server.idle_timeout_ms,
                 "Close a connection that sends nothing for this long")
      ->check(tally::bin::InRange(1, kHourMs))
      ->capture_default_str();
  app.add_option("--frame-timeout-ms", server.frame_timeout_ms,
                 "Close a connection whose frame is not complete this long after its first byte")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-buffer-bytes", server.max_buffer_bytes,
                 "Receive buffers may grow by this much for all client connections together "
                 "(and as much for all gossip sessions); a frame that needs more is refused")
      ->check(tally::bin::InRange(int64_t{64} << 10, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--write-timeout-ms", server.write_timeout_ms,
                 "Close a connection that does not take a response for this long")
      ->check(tally::bin::InRange(1, kHourMs))
      ->capture_default_str();
  app.add_option("--drain-timeout-ms", server.drain_timeout_ms,
                 "At shutdown, wait this long for in-flight requests")
      ->check(tally::bin::InRange(0, kHourMs))
      ->capture_default_str();
  section(kKeys);
  app.add_option("--sweep-interval-ms", server.sweep_interval_ms,
                 "Free expired keys this often; 0 disables the periodic sweep")
      ->check(tally::bin::InRange(0, kDayMs))
      ->capture_default_str();
  app.add_option("--max-keys", limiter_options.max_keys,
                 "Most keys held; a check that needs a new key beyond it gets resource_exhausted")
      ->check(tally::bin::InRange(1, kMostKeys))
      ->capture_default_str();
  section(kCluster);
  app.add_option("--node-id", limiter_options.node_id,
                 "This node's id (its G-counter slot); 0: the one recorded in the data "
                 "directory, or a new random one")
      ->capture_default_str();
  section(kStorage);
  const CLI::Option* data_dir_option =
      app.add_option("--data-dir", data_dir, "Where counters persist (RocksDB); one per node")
          ->capture_default_str();
  app.add_flag("--memory-only", memory_only, "Keep no state on disk: a restart forgets all counts");
  app.add_option("--flush-interval-ms", persister_options.flush_interval_ms,
                 "Write changed counters this often; a crash loses at most this much")
      ->check(tally::bin::InRange(1, 60'000))
      ->capture_default_str();
  app.add_option("--peer-flush-interval-ms", persister_options.peer_flush_interval_ms,
                 "Write peers' counts merged into counters this often (a restart takes them "
                 "from the peers first; only a node that no peer answers reads them from disk)")
      ->check(tally::bin::InRange(1, 600'000))
      ->capture_default_str();
  app.add_flag("--sync", sync,
               "fsync every flush (survives power loss); default: the WAL reaches the OS, "
               "which survives a crash of tallyd but not of the machine");
  app.add_flag("--salvage-wal", salvage_wal,
               "Start even though RocksDB's write-ahead log is damaged: skip the damaged records, "
               "restore what is intact, and log what was dropped (without it tallyd refuses)");
  app.add_option("--compaction-interval-ms", persister_options.compaction_interval_ms,
                 "Compact the database this often, dropping expired counters; 0: only as "
                 "RocksDB compacts on its own")
      ->check(tally::bin::InRange(0, 7 * kDayMs))
      ->capture_default_str();
  section(kCluster);
  app.add_option("--seed", gossip_options.seeds,
                 "A member's gossip address, host:port (a name may resolve to several); repeat "
                 "for more, or separate them with commas. The node joins the cluster through any "
                 "one that answers; listing "
                 "this node itself is fine. Without seeds or a secret, the node is local-only")
      ->check(tally::bin::HostPortCheck());
  app.add_option("--gossip-address", gossip_address,
                 "Address of the gossip port (default: --address)");
  app.add_option("--gossip-advertise", gossip_options.advertise_address,
                 "host:port other members dial to reach this node's gossip port (default: "
                 "--gossip-address and the bound port; required when that is 0.0.0.0 or ::)")
      ->check(tally::bin::HostPortCheck());
  app.add_option("--gossip-port", gossip_options.listen_port,
                 "TCP port peers send their state to; 0 picks a free one")
      ->check(tally::bin::InRange(0, 65'535))
      ->capture_default_str();
  app.add_option("--gossip-port-file", gossip_port_file,
                 "Write the bound gossip port to this file once listening");
  app.add_option("--max-gossip-connections", gossip_options.max_connections,
                 "Gossip connections from peers beyond this are closed at once")
      ->check(tally::bin::InRange(1, 100'000))
      ->capture_default_str();
  app.add_option("--cluster-secret-file", cluster_secret_file,
                 "File holding the secret every member shares (at least 16 bytes; a trailing "
                 "newline is ignored); required with --seed. With it and no --seed, the node "
                 "is the first member of a cluster that others join");
  app.add_option("--gossip-interval-ms", gossip_options.interval_ms,
                 "Send the keys admitted to since the last round this often")
      ->check(tally::bin::InRange(1, 10'000))
      ->capture_default_str();
  limiter_options.gossip_max_delay_ms = 10'000;
  app.add_option("--gossip-max-delay-ms", limiter_options.gossip_max_delay_ms,
                 "Admissions on a key far from its limit (within this node's share of what "
                 "remains) may wait this long before they are sent, at most a quarter of the "
                 "window (an eighth for a token bucket); near the limit they go every round. 0: "
                 "every admission goes at the next round")
      ->check(tally::bin::InRange(0, kHourMs))
      ->capture_default_str();
  bool no_relay = false;
  app.add_flag("--no-gossip-relay", no_relay,
               "Send admissions that waited to every peer, instead of to one member that "
               "relays the key (which sends every node's counts of it on at once, up to "
               "--gossip-max-delay-ms later); and relay for no one");
  app.add_option("--full-sync-interval-ms", gossip_options.full_sync_interval_ms,
                 "Anti-entropy this often: each peer gets the digests of the key ranges changed "
                 "since it last had them, and the ranges whose digests differ; after each "
                 "reconnect, or when it asks, every live key")
      ->check(tally::bin::InRange(100, kDayMs))
      ->capture_default_str();
  app.add_option("--membership-interval-ms", gossip_options.membership_interval_ms,
                 "Probe one member this often (SWIM): a ping, and its ack, carrying the "
                 "membership's changes")
      ->check(tally::bin::InRange(10, 10'000))
      ->capture_default_str();
  app.add_option("--suspect-after-ms", gossip_options.suspect_after_ms,
                 "A member that answers no probe, directly or through 3 others, within this long "
                 "is suspect (longer while this node is itself slow)")
      ->check(tally::bin::InRange(10, kHourMs))
      ->capture_default_str();
  app.add_option("--dead-after-ms", gossip_options.dead_after_ms,
                 "... and dead if it does not answer the suspicion within this long of the probe "
                 "(it still counts for the limits until it leaves)")
      ->check(tally::bin::InRange(10, kHourMs))
      ->capture_default_str();
  app.add_option("--max-clock-offset-ms", gossip_options.max_clock_offset_ms,
                 "Warn in the log when a member's clock is off this node's by more (windows are "
                 "aligned to wall clocks; offsets are in stats and tallyctl cluster)")
      ->check(tally::bin::InRange(1, kHourMs))
      ->capture_default_str();
  app.add_option("--recovery-timeout-ms", recovery_timeout_ms,
                 "At start, wait at most this long to join and for every live member's full "
                 "sync before serving")
      ->check(tally::bin::InRange(0, kHourMs))
      ->capture_default_str();
  app.add_flag("--plain-gossip", plain_gossip,
               "Near a limit, let this node spend all that its view leaves until it hears from "
               "the others, instead of keeping what it has not sent yet within its share of it "
               "(1 / nodes; on a key at its limit, weighed by demand): a burst at one node passes "
               "at once, but nodes admitting at once pass the limit together");
  app.add_flag("--escrow", escrow,
               "Near a limit, spend only this node's demand-weighted share of what remains per "
               "epoch (fixed window, sliding counter, token bucket; the sliding log keeps its "
               "share of what remains): tighter limits, bursts at quiet nodes wait");
  app.add_option("--escrow-epoch-ms", escrow_epoch_ms,
                 "The epoch of --escrow; keep it several --gossip-interval-ms long")
      ->check(tally::bin::InRange(10, 60'000))
      ->capture_default_str();
  app.add_option("--partition-mode", partition_mode,
                 "While some peers cannot be reached: fail-open enforces the whole limit from "
                 "what this node knows; share keeps its own admissions to limit / nodes")
      ->check(CLI::IsMember({"fail-open", "share"}))
      ->capture_default_str();
  section(kLogging);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  if (const std::optional<int> exit_code = tally::bin::ParseOrExit(app, argc, argv)) {
    return *exit_code;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  tally::Readiness readiness;  // what /readyz, tally_ready and systemd are told
  tally::bin::StartupProgress progress(&readiness, tally::SystemClock::Default());
  if (memory_only && data_dir_option->count() > 0) {
    spdlog::error(
        "not starting: --memory-only keeps nothing on disk, but --data-dir is given "
        "(on the command line or in --config): drop one of them");
    return 1;
  }
  // Files are read before anything else starts: a refusal leaves nothing behind.
  const bool clustered = !gossip_options.seeds.empty() || !cluster_secret_file.empty();
  if (clustered) {
    if (cluster_secret_file.empty()) {
      spdlog::error(
          "not starting: --seed needs --cluster-secret-file: only nodes that hold the "
          "cluster secret may gossip");
      return 1;
    }
    if (tally::Status status =
            tally::bin::ReadClusterSecret(cluster_secret_file, &gossip_options.cluster_secret);
        !status.ok()) {
      spdlog::error("not starting: {}", status.ToString());
      return 1;
    }
  }
  tally::bin::TlsContexts tls;  // outlives the server and gossip that use them
  if (tally::Status status =
          tally::bin::MakeTlsContexts(tls_options, clustered, gossip_options.cluster_secret, &tls);
      !status.ok()) {
    spdlog::error("not starting: {}", status.ToString());
    return 1;
  }
  if (tally::Status status = tally::bin::MakeGrpcTls(tls_options, &front_options.grpc.tls);
      !status.ok()) {
    spdlog::error("not starting: {}", status.ToString());
    return 1;
  }
  server.tls = tls.client.get();
  gossip_options.tls = tls.gossip.get();
  if (tls.gossip) spdlog::info("gossip over {}", tls.gossip->description());
  if (tls.client) spdlog::info("client ports over {}", tls.client->description());
  std::unique_ptr<tally::bin::Fronts> fronts;
  if (tally::Status status = tally::bin::Fronts::LoadPolicies(front_options, &fronts);
      !status.ok()) {
    spdlog::error("not starting: {}", status.ToString());
    return 1;
  }

  std::unique_ptr<tally::storage::Store> store;
  if (!memory_only) {
    tally::storage::Store::Options store_options{data_dir, sync};
    store_options.salvage_wal = salvage_wal;
    tally::Status status = tally::storage::Store::Open(store_options, &store);
    if (status.ok()) status = store->LoadNodeId(limiter_options.node_id, &limiter_options.node_id);
    if (!status.ok()) {
      spdlog::error("not starting: {}", status.ToString());
      return 1;
    }
    limiter_options.track_changes = true;
  }
  while (limiter_options.node_id == 0) limiter_options.node_id = std::random_device()();
  spdlog::info("node id {}; {}", limiter_options.node_id,
               memory_only ? "memory only" : "data in " + data_dir);

  if (gossip_options.suspect_after_ms >= gossip_options.dead_after_ms ||
      gossip_options.membership_interval_ms >= gossip_options.suspect_after_ms) {
    spdlog::error(
        "not starting: need --membership-interval-ms < --suspect-after-ms < "
        "--dead-after-ms");
    return 1;
  }
  limiter_options.replicate = clustered;
  // Members split keys into the same ranges for anti-entropy; clients cannot
  // choose keys that collide in the tables.
  limiter_options.key_hash_seed =
      clustered ? tally::protocol::KeyHashSeed(gossip_options.cluster_secret)
                : (uint64_t{std::random_device()()} << 32 | std::random_device()());
  if (clustered) {  // the cluster's size comes from the membership
    limiter_options.escrow_epoch_ms = escrow ? escrow_epoch_ms : 0;
    // What a node sent counts as on its way for a tenth of a round: deltas
    // reach peers on a LAN well within it.
    limiter_options.share_delivery_ms = std::max<int64_t>(1, gossip_options.interval_ms / 10);
    limiter_options.share_wait_ms =
        plain_gossip ? 0 : gossip_options.interval_ms + limiter_options.share_delivery_ms;
    limiter_options.partition_share = partition_mode == "share";
  }
  tally::Limiter limiter(limiter_options);
  const tally::Clock* clock = tally::SystemClock::Default();
  tally::storage::Store::LoadStats loaded;
  int64_t restore_ms = 0;
  uint64_t keys_restored = 0;  // distinct keys; a key in a checkpoint and later runs is one
  std::optional<tally::Persister> persister;
  std::optional<tally::Gossip> gossip;
  int64_t recovery_ms = 0;
  size_t recovered_from = 0;
  server.policies = fronts->policies();
  server.on_reload = [&fronts] { fronts->ReloadPolicies(); };
  server.on_shutdown = [&progress] { progress.Stopping(); };
  if (clustered) {  // requests are served once gossip runs (Run, below)
    server.forget_member = [&gossip](tally::NodeId member, bool* forgotten) {
      return gossip->ForgetMember(member, forgotten);
    };
  }
  server.add_stats = [&](tally::protocol::StatsReply* stats) {
    fronts->AddStats(stats);
    if (gossip) {
      gossip->AddStats(stats);
      stats->recovery_ms = static_cast<uint64_t>(recovery_ms);
      stats->recovery_peers_synced = recovered_from;
    }
    if (persister) {
      const tally::Persister::Stats persisted = persister->stats();
      stats->restore_ms = static_cast<uint64_t>(restore_ms);
      stats->keys_restored = keys_restored;
      stats->storage_flushes = persisted.flushes;
      stats->storage_checkpoints = persisted.checkpoints;
      stats->storage_keys_written = persisted.keys_written;
      stats->storage_write_errors = persisted.write_errors;
      stats->storage_degraded = persisted.degraded;
      stats->storage_disk_bytes = store->DiskBytes();
    }
  };

  // Built before the restore so that the admin port answers (/readyz: 503
  // with what the node waits for) while the node restores and recovers.
  tally::Server daemon(server, &limiter, clock);
  // What the admin port's /metrics answers. The node's stats only once it is
  // ready: until then the restore and recovery are still building what they
  // read (readiness orders the two: it is set after them, under its mutex).
  tally::Metrics metrics(
      {.stats = [&] { return readiness.ready() ? daemon.Stats() : tally::protocol::StatsReply(); },
       .domain_names = [&fronts] { return fronts->DomainSlotNames(); },
       .rule_series = [&fronts] { return fronts->PolicyRuleSeries(); },
       .readiness = &readiness});
  metrics.AddFront("protocol", &daemon.protocol_counters());
  if (tally::Status status =
          fronts->AddTo(&daemon, server.address, static_cast<size_t>(std::max(1, server.threads)),
                        &limiter, &readiness, &metrics);
      !status.ok()) {
    spdlog::error("not starting: {}", status.ToString());
    return 1;
  }
  if (store) {  // every live counter is back before the first request is served
    const int64_t started_ms = clock->MonotonicMs();
    progress.Step("restoring counters from " + data_dir);
    if (tally::Status status = store->Load(
            [&](const tally::KeySnapshot& snapshot) { return limiter.Restore(snapshot); }, &loaded,
            [&](const tally::storage::Store::LoadProgress& read) {
              progress.Restoring(read.records, read.estimated_records);
            });
        !status.ok()) {
      spdlog::error("not starting: {}", status.ToString());
      return 1;
    }
    restore_ms = clock->MonotonicMs() - started_ms;
    keys_restored = limiter.key_count();
    spdlog::info(
        "restored {} keys from {} records in {} ms ({} expired, {} corrupt and {} over "
        "max-keys skipped)",
        keys_restored, loaded.records, restore_ms, loaded.expired, loaded.corrupt, loaded.refused);
    if (loaded.corrupt > 0) {
      spdlog::warn("damaged records skipped: {} ({}); their counts are lost", loaded.corrupt,
                   tally::storage::DescribeLostKeys(loaded));
    }
    for (const auto& [first, last] : loaded.missing_runs) {
      spdlog::warn(
          "runs {} to {} are missing (dropped from the damaged write-ahead log): the "
          "changes they held are lost",
          first, last);
    }
    if (store->wal_salvaged()) {
      spdlog::warn(
          "salvaged: the newest run restored is run {}; any written after it that were "
          "in the dropped bytes are lost",
          loaded.last_run);
    }
  }
  // What this node kept back from its peers (gossip delay) and had not
  // written is lost by a crash: until the windows it counted in pass, it
  // counts as spent, on every node (node/gossip/member_losses.h). The data
  // directory says whether the last run stopped cleanly and holds the
  // losses known then; without one (or with a wiped one) the peers' records
  // of this node's last run say it.
  bool crashed = false;
  if (store) {
    if (tally::Status status = store->BeginServing(&crashed); !status.ok()) {
      spdlog::error("not starting: {}", status.ToString());
      return 1;
    }
    if (tally::Status status = store->LoadCrashLosses(&gossip_options.stored_crash_losses);
        !status.ok()) {
      spdlog::warn("{}: this node counts the crash losses its peers tell it of", status.ToString());
    }
    gossip_options.crashed = crashed;
    gossip_options.crash_losses_changed = [&store](std::span<const tally::CrashLoss> losses) {
      if (tally::Status status = store->SaveCrashLosses(losses); !status.ok()) {
        spdlog::warn("{}: the crash losses are kept in memory only", status.ToString());
      }
    };
    if (crashed && clustered) {
      spdlog::warn(
          "the last run on {} did not stop cleanly: what it admitted and had neither written "
          "nor sent is lost, and counts as spent until the windows it counted in pass",
          data_dir);
    }
    persister_options.clock = clock;
    persister.emplace(persister_options, &limiter, store.get());
    persister->Start();
  }

  // A restarted node first takes back from its peers what they hold of its
  // own slots (increments gossiped but not flushed before a crash): serving
  // before that would undercount.
  if (clustered) {
    gossip_options.listen_address = gossip_address.empty() ? server.address : gossip_address;
    gossip_options.clock = clock;
    gossip_options.max_buffer_bytes = server.max_buffer_bytes;
    gossip_options.relay = !no_relay;
    gossip.emplace(gossip_options, &limiter);
    limiter.SetRoundWanted([&gossip] { gossip->WantRound(); });  // before any check
    limiter.SetGossipWork([&gossip] { gossip->NoteWork(); });
    if (tally::Status status = gossip->Listen(); !status.ok()) {
      spdlog::error("not starting: {}", status.ToString());
      return 1;
    }
    if (!gossip_port_file.empty() && !tally::bin::WritePortFile(gossip_port_file, gossip->port())) {
      spdlog::error("cannot write gossip port file {}", gossip_port_file);
      return 1;
    }
    gossip->Start();
    const int64_t started_ms = clock->MonotonicMs();
    progress.Step("joining the cluster and waiting for the members' full syncs");
    const tally::Gossip::Recovery recovery =
        gossip->WaitForRecovery(recovery_timeout_ms, [&](const tally::Gossip::Recovery& now) {
          progress.Recovering(now.joined, now.peers_synced, now.peers_alive);
        });
    recovered_from = recovery.peers_synced;
    recovery_ms = clock->MonotonicMs() - started_ms;
    if (!recovery.joined) {
      spdlog::warn(
          "serving after {} ms without having joined: no seed answered in "
          "--recovery-timeout-ms; this node joins when one does",
          recovery_ms);
    } else if (recovery.peers_synced < recovery.peers_alive) {
      spdlog::warn(
          "serving after {} ms with full syncs from {} of {} live members: the others "
          "did not answer in --recovery-timeout-ms; what they hold arrives when they do",
          recovery_ms, recovery.peers_synced, recovery.peers_alive);
    } else {
      spdlog::info("joined; full syncs from all {} live members in {} ms", recovery.peers_synced,
                   recovery_ms);
    }
  }

  if (tally::Status status = daemon.Listen(); !status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  if (!port_file.empty() && !tally::bin::WritePortFile(port_file, daemon.port())) {
    spdlog::error("cannot write port file {}", port_file);
    return 1;
  }
  if (tally::Status status = fronts->Serve(server.address, &limiter); !status.ok()) {
    spdlog::error("not starting: {}", status.ToString());
    return 1;
  }
  progress.Ready();
  daemon.Run();
  fronts->Stop(server.drain_timeout_ms);
  if (gossip)
    gossip->Leave(kLeaveTimeoutMs);  // the others drop this node now, not after dead-after-ms
  if (persister) {  // a clean shutdown loses nothing: what changed, then a checkpoint (logged)
    if (tally::Status status = persister->Stop(); !status.ok()) {
      spdlog::error("final write failed, what changed since the last write is lost: {}",
                    status.ToString());
      return 1;
    }
  }
  return 0;
}
