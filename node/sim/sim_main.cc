// tally-sim: tallyd's own engine, coordination, codecs, round logic and
// membership, at N nodes under a simulated clock and network, faults drawn
// from a seed, and invariants checked as it runs (node/sim/simulation.h).
// One seed, one run: a failure prints the command that replays it.
//
//   tally-sim --nodes 30 --seed 7 --seconds 20 --faults all
//   tally-sim --seeds 1-200 --nodes 3-30 --seconds 16 --faults random   (a suite)
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "node/common/version.h"
#include "node/sim/simulation.h"

namespace {

using tally::sim::Faults;
using tally::sim::SimOptions;
using tally::sim::SimReport;

// Two numbers "A-B" (or one, "A": A-A).
bool ParseRange(const std::string& text, uint64_t* first, uint64_t* last) {
  const size_t dash = text.find('-');
  try {
    *first = std::stoull(text.substr(0, dash));
    *last = dash == std::string::npos ? *first : std::stoull(text.substr(dash + 1));
  } catch (const std::exception&) {
    return false;
  }
  return *first <= *last;
}

std::string ReplayCommand(const SimOptions& options, const std::string& mode) {
  std::string command =
      "tally-sim --nodes " + std::to_string(options.nodes) + " --seed " +
      std::to_string(options.seed) + " --seconds " + std::to_string(options.seconds) +
      " --faults " + options.faults.ToString() + " --mode " + mode + " --limit " +
      std::to_string(options.workload.limit) + " --window-ms " +
      std::to_string(options.workload.window_ms) + " --far-keys " +
      std::to_string(options.workload.far_keys) + " --far-rate " +
      std::to_string(static_cast<int64_t>(options.workload.far_rate_per_s)) + " --interval-ms " +
      std::to_string(options.node.interval_ms) + " --max-delay-ms " +
      std::to_string(options.node.gossip_max_delay_ms) + " --anti-entropy-ms " +
      std::to_string(options.node.anti_entropy_interval_ms) + " --delay-ms " +
      std::to_string(options.delay_min_ms) + "-" + std::to_string(options.delay_max_ms) +
      " --link-extra-ms " + std::to_string(options.link_extra_max_ms);
  if (options.settle_ms > 0) command += " --settle-ms " + std::to_string(options.settle_ms);
  if (options.break_repair) command += " --break-repair";
  if (!options.check_views) command += " --no-check-views";
  return command;
}

nlohmann::json ToJson(const SimOptions& options, const SimReport& report) {
  nlohmann::json json = {{"nodes", options.nodes},
                         {"seed", options.seed},
                         {"seconds", options.seconds},
                         {"faults", options.faults.ToString()},
                         {"link_extra_max_ms", options.link_extra_max_ms},
                         {"ok", report.ok},
                         {"steps", report.steps},
                         {"decisions", report.decisions},
                         {"delta_entries", report.delta_entries},
                         {"messages", report.messages},
                         {"bytes", report.bytes},
                         {"convergence_ms", report.convergence_ms},
                         {"keys_held", report.keys_held},
                         {"heap_bytes", report.heap_bytes},
                         {"cpu_s", report.cpu_s},
                         {"crashes", report.crashes},
                         {"partitions", report.partitions},
                         {"clock_steps", report.clock_steps},
                         {"joins", report.joins},
                         {"leaves", report.leaves},
                         {"fingerprint", report.fingerprint}};
  const double decisions = std::max<double>(1, static_cast<double>(report.decisions));
  json["entries_per_decision"] = static_cast<double>(report.delta_entries) / decisions;
  json["bytes_per_decision"] = static_cast<double>(report.bytes) / decisions;
  json["cpu_us_per_decision"] = report.cpu_s * 1e6 / decisions;
  json["heap_bytes_per_key_held"] =
      report.keys_held == 0
          ? 0.0
          : static_cast<double>(report.heap_bytes) / static_cast<double>(report.keys_held);
  for (int kind = 0; kind < tally::sim::kLoadKinds; ++kind) {
    const auto& totals = report.totals[kind];
    json["admitted"][tally::sim::LoadKindName(static_cast<tally::sim::LoadKind>(kind))] = {
        {"cluster", totals.admitted},
        {"central", totals.central},
        {"ratio", totals.central == 0 ? 0.0
                                      : static_cast<double>(totals.admitted) /
                                            static_cast<double>(totals.central)}};
  }
  if (!report.ok) {
    json["violation"] = report.violation;
    json["violation_step"] = report.violation_step;
    json["violation_at_ms"] = report.violation_at_ms;
  }
  return json;
}

void PrintTable(const SimOptions& options, const SimReport& report) {
  const double decisions = std::max<double>(1, static_cast<double>(report.decisions));
  std::printf("tally-sim: %zu nodes, seed %llu, %lld s, faults %s: %s\n", options.nodes,
              static_cast<unsigned long long>(options.seed),
              static_cast<long long>(options.seconds), options.faults.ToString().c_str(),
              report.ok ? "ok" : "VIOLATION");
  std::printf("  %-24s %12s %12s %8s\n", "load", "cluster", "central", "ratio");
  for (int kind = 0; kind < tally::sim::kLoadKinds; ++kind) {
    const auto& totals = report.totals[kind];
    std::printf("  %-24s %12llu %12llu %8.3f\n",
                tally::sim::LoadKindName(static_cast<tally::sim::LoadKind>(kind)),
                static_cast<unsigned long long>(totals.admitted),
                static_cast<unsigned long long>(totals.central),
                totals.central == 0
                    ? 0.0
                    : static_cast<double>(totals.admitted) / static_cast<double>(totals.central));
  }
  std::printf(
      "  decisions %llu; delta entries/decision %.2f; bytes/decision %.0f; "
      "convergence %lld ms; CPU/decision %.1f us; steps %llu\n",
      static_cast<unsigned long long>(report.decisions),
      static_cast<double>(report.delta_entries) / decisions,
      static_cast<double>(report.bytes) / decisions, static_cast<long long>(report.convergence_ms),
      report.cpu_s * 1e6 / decisions, static_cast<unsigned long long>(report.steps));
  std::printf(
      "  faults: %llu crashes, %llu partitions, %llu clock steps, %llu joins, %llu leaves\n",
      static_cast<unsigned long long>(report.crashes),
      static_cast<unsigned long long>(report.partitions),
      static_cast<unsigned long long>(report.clock_steps),
      static_cast<unsigned long long>(report.joins),
      static_cast<unsigned long long>(report.leaves));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tally-sim: tallyd's code at N simulated nodes, faults from a seed, invariants checked"};
  app.set_version_flag("--version", tally::VersionLine("tally-sim"));
  SimOptions options;
  std::string nodes = "3", seeds, faults = "none", mode = "default";
  bool json = false;
  app.add_option("--nodes", nodes, "nodes, or a range A-B with --seeds (drawn per seed)");
  app.add_option("--seed", options.seed, "the run's seed");
  app.add_option("--seeds", seeds,
                 "a suite: every seed of A-B, each with its own draw of "
                 "--nodes and, with --faults random, of faults");
  app.add_option("--seconds", options.seconds, "simulated seconds (the last part settles)")
      ->check(CLI::Range(1, 86'400));
  app.add_option("--faults", faults,
                 "none, all, random (with --seeds), or a list of loss, duplicate, reorder, "
                 "partition, crash, clock, churn");
  app.add_option("--mode", mode, "default, escrow or plain (no coordination)")
      ->check(CLI::IsMember({"default", "escrow", "plain"}));
  app.add_option("--limit", options.workload.limit, "near keys' limit per window")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--window-ms", options.workload.window_ms, "near keys' window")
      ->check(CLI::Range(100, 3'600'000));
  app.add_option("--far-keys", options.workload.far_keys, "far keys per algorithm (zipf)");
  app.add_option("--far-rate", options.workload.far_rate_per_s,
                 "checks/s on far keys, per algorithm")
      ->check(CLI::Range(0.001, 1e6));
  app.add_option("--interval-ms", options.node.interval_ms, "gossip interval")
      ->check(CLI::Range(1, 10'000));
  app.add_option("--max-delay-ms", options.node.gossip_max_delay_ms,
                 "the longest an admission far from its limit waits (tallyd's "
                 "--gossip-max-delay-ms)")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--anti-entropy-ms", options.node.anti_entropy_interval_ms,
                 "anti-entropy's interval (tallyd's --full-sync-interval-ms)")
      ->check(CLI::Range(100, 600'000));
  std::string delay = "1-3";
  app.add_option("--delay-ms", delay, "one-way delay per message, a range A-B");
  app.add_option("--link-extra-ms", options.link_extra_max_ms,
                 "each link's own extra delay, drawn once per link and direction in [0, this]")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--settle-ms", options.settle_ms, "the quiet end (0: long enough to converge)");
  app.add_flag("--break-repair", options.break_repair,
               "a test of the simulation: drop deltas and never repair them (a seed must fail)");
  app.add_flag("!--no-check-views", options.check_views,
               "skip the check that views never go back (a read per merged entry)");
  app.add_flag("--json", json, "print one JSON object per run");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // the nodes' news (restarts, links) is not the report
  options.node.escrow = mode == "escrow";
  options.node.plain_gossip = mode == "plain";

  uint64_t first_seed = options.seed, last_seed = options.seed, min_nodes = 0, max_nodes = 0;
  if (!seeds.empty() && !ParseRange(seeds, &first_seed, &last_seed)) {
    std::cerr << "--seeds: expected A-B, got '" << seeds << "'\n";
    return 2;
  }
  if (!ParseRange(nodes, &min_nodes, &max_nodes) || min_nodes < 1 || max_nodes > 5'000) {
    std::cerr << "--nodes: expected a count or a range A-B within 1-5000, got '" << nodes << "'\n";
    return 2;
  }
  uint64_t delay_min_ms = 0, delay_max_ms = 0;
  if (!ParseRange(delay, &delay_min_ms, &delay_max_ms) || delay_min_ms < 1 ||
      delay_max_ms > 60'000) {
    std::cerr << "--delay-ms: expected A-B within 1-60000, got '" << delay << "'\n";
    return 2;
  }
  options.delay_min_ms = static_cast<int64_t>(delay_min_ms);
  options.delay_max_ms = static_cast<int64_t>(delay_max_ms);
  const bool random_faults = faults == "random";
  std::optional<Faults> fixed_faults = random_faults ? Faults{} : tally::sim::ParseFaults(faults);
  if (!fixed_faults) {
    std::cerr << "--faults: unknown fault in '" << faults << "'\n";
    return 2;
  }
  int failures = 0;
  for (uint64_t seed = first_seed; seed <= last_seed; ++seed) {
    SimOptions run = options;
    run.seed = seed;
    tally::sim::Random draw(seed ^ 0x5eed5eed5eed5eed);
    run.nodes = static_cast<size_t>(min_nodes + draw.Below(max_nodes - min_nodes + 1));
    run.faults = *fixed_faults;
    if (random_faults) {
      run.faults = Faults{draw.Chance(0.3), draw.Chance(0.3), draw.Chance(0.3), draw.Chance(0.4),
                          draw.Chance(0.4), draw.Chance(0.3), draw.Chance(0.3)};
      // Some clusters span zones: each link's own delay, up to 50 ms.
      if (draw.Chance(0.3)) run.link_extra_max_ms = draw.Between(5, 50);
    }
    const SimReport report = tally::sim::RunSimulation(run);
    if (json) {
      std::cout << ToJson(run, report).dump() << "\n";
    } else {
      PrintTable(run, report);
    }
    if (!report.ok) {
      ++failures;
      std::printf("VIOLATION at step %llu (%lld ms): %s\nreplay: %s\n",
                  static_cast<unsigned long long>(report.violation_step),
                  static_cast<long long>(report.violation_at_ms), report.violation.c_str(),
                  ReplayCommand(run, mode).c_str());
    }
    std::fflush(stdout);
  }
  if (last_seed > first_seed) {
    std::printf("%d of %llu seeds failed\n", failures,
                static_cast<unsigned long long>(last_seed - first_seed + 1));
  }
  return failures == 0 ? 0 : 1;
}
