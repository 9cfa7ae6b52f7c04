#include "node/metrics/families.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

namespace tally::metrics {
namespace {

double Seconds(uint64_t ms) { return static_cast<double>(ms) / 1'000.0; }

}  // namespace

void Families::Start(const std::string& name, const std::string& help,
                     prometheus::MetricType type) {
  prometheus::MetricFamily& family = families_.emplace_back();
  family.name = name;
  family.help = help;
  family.type = type;
}

void Families::Counter(const std::string& name, const std::string& help) {
  Start(name, help, prometheus::MetricType::Counter);
}

void Families::Gauge(const std::string& name, const std::string& help) {
  Start(name, help, prometheus::MetricType::Gauge);
}

void Families::Histogram(const std::string& name, const std::string& help) {
  Start(name, help, prometheus::MetricType::Histogram);
}

void Families::Gauge(const std::string& name, const std::string& help, double value) {
  Gauge(name, help);
  Add(value);
}

void Families::Add(double value, Labels labels) {
  prometheus::MetricFamily& family = families_.back();
  prometheus::ClientMetric& metric = family.metric.emplace_back();
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
}

void Families::AddHistogram(const std::vector<double>& bounds, const std::vector<uint64_t>& counts,
                            double sum, Labels labels) {
  prometheus::ClientMetric& metric = families_.back().metric.emplace_back();
  metric.label = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size() && i < counts.size(); ++i) {
    cumulative += counts[i];
    const double bound = i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back({cumulative, bound});
  }
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = sum;
}

std::vector<prometheus::MetricFamily> Families::Take() {
  std::vector<prometheus::MetricFamily> taken;
  for (prometheus::MetricFamily& family : families_) {
    if (!family.metric.empty()) taken.push_back(std::move(family));
  }
  families_.clear();
  return taken;
}

void Families::Named(const std::string& name, const std::string& help) {
  if (name.ends_with("_total")) {
    Counter(name, help);
  } else {
    Gauge(name, help);
  }
}

void AddStatsFamilies(const protocol::StatsReply& s, Families* f) {
  const auto count = [](uint64_t value) { return static_cast<double>(value); };
  struct Scalar {
    const char* name;  // a counter when it ends in _total, else a gauge
    const char* help;
    double value;
  };
  const Scalar scalars[] = {
      {"tally_uptime_seconds", "Time since the node started", Seconds(s.uptime_ms)},
      {"tally_keys", "Keys (limits of a key) held in memory", count(s.keys)},
      {"tally_connections_open", "Client connections open, on every front's port",
       count(s.connections_open)},
      {"tally_connections_accepted_total", "Client connections accepted",
       count(s.connections_total)},
      {"tally_restore_duration_seconds", "How long the node took to restore its counters",
       Seconds(s.restore_ms)},
      {"tally_restored_keys", "Keys restored from disk at start", count(s.keys_restored)},
      {"tally_storage_flushes_total", "Runs of changed counters written to RocksDB",
       count(s.storage_flushes)},
      {"tally_storage_checkpoints_total", "Checkpoints written (every live key)",
       count(s.storage_checkpoints)},
      {"tally_storage_written_keys_total", "Keys written in flushes and checkpoints",
       count(s.storage_keys_written)},
      {"tally_storage_write_errors_total", "Writes to RocksDB that failed",
       count(s.storage_write_errors)},
      {"tally_storage_disk_bytes", "Size of the data directory", count(s.storage_disk_bytes)},
      {"tally_storage_degraded", "1 while the last write failed and the node serves from memory",
       s.storage_degraded ? 1.0 : 0.0},
      {"tally_policy_domains", "Domains in the policies in force", count(s.policy_domains)},
      {"tally_policy_rules", "Limits in the policies in force", count(s.policy_rules)},
      {"tally_policy_reloads_total", "Policy sets that took effect, the first included",
       count(s.policy_reloads)},
      {"tally_policy_reload_failures_total", "Policy reloads refused (the previous set stayed)",
       count(s.policy_reload_failures)},
      {"tally_grpc_calls_total", "ShouldRateLimit calls answered with an OK status",
       count(s.grpc_requests)},
      {"tally_grpc_over_limit_calls_total", "ShouldRateLimit calls answered OVER_LIMIT",
       count(s.grpc_over_limit)},
      {"tally_grpc_refused_calls_total", "ShouldRateLimit calls answered with an error",
       count(s.grpc_refused)},
      {"tally_http_requests_total", "Requests answered on the HTTP port, refusals included",
       count(s.http_requests)},
      {"tally_http_allowed_total", "HTTP checks answered 200", count(s.http_allowed)},
      {"tally_http_denied_total", "HTTP checks answered 429 (or 403 on /v1/auth)",
       count(s.http_denied)},
      {"tally_http_refused_total", "HTTP requests refused (malformed, invalid, key cap)",
       count(s.http_refused)},
      {"tally_resp_commands_total", "Commands answered on the RESP port", count(s.resp_commands)},
      {"tally_resp_throttled_total", "RESP limit checks that denied", count(s.resp_throttled)},
      {"tally_resp_errors_total", "RESP error replies, protocol errors included",
       count(s.resp_errors)},
      {"tally_recovery_duration_seconds",
       "How long the node waited at start for its peers' full syncs", Seconds(s.recovery_ms)},
      {"tally_recovery_synced_peers", "Peers whose full sync arrived during that wait",
       count(s.recovery_peers_synced)},
      {"tally_gossip_rounds_total", "Gossip rounds (a delta to every link each interval)",
       count(s.gossip_rounds)},
      {"tally_gossip_sent_bytes_total", "Bytes sent on every gossip link",
       count(s.gossip_bytes_sent)},
      {"tally_gossip_received_bytes_total", "Bytes received from every peer",
       count(s.gossip_bytes_received)},
      {"tally_gossip_delta_sent_bytes_total", "Bytes of delta frames sent, summed over the links",
       count(s.gossip_delta_bytes_sent)},
      {"tally_gossip_delta_sent_entries_total",
       "Key entries in delta frames sent, summed over the links",
       count(s.gossip_delta_entries_sent)},
      {"tally_gossip_full_syncs_sent_total", "Full syncs sent to peers",
       count(s.gossip_full_syncs_sent)},
      {"tally_gossip_full_syncs_received_total", "Full syncs received from peers",
       count(s.gossip_full_syncs_received)},
      {"tally_gossip_merged_entries_total", "Entries from peers merged into the engine",
       count(s.gossip_entries_merged)},
      {"tally_gossip_rejected_entries_total",
       "Entries from peers the engine refused (bad key, order, skew, cap)",
       count(s.gossip_entries_rejected)},
      {"tally_gossip_refused_sessions_total",
       "Gossip sessions closed for garbage, a bad hello or silence",
       count(s.gossip_sessions_refused)},
      {"tally_gossip_digests_sent_total",
       "Anti-entropy: key range digests sent, summed over the links", count(s.gossip_digests_sent)},
      {"tally_gossip_ranges_sent_total",
       "Anti-entropy: key ranges sent whole because a peer's digest differed",
       count(s.gossip_ranges_sent)},
  };
  for (const Scalar& scalar : scalars) {
    f->Named(scalar.name, scalar.help);
    f->Add(scalar.value);
  }

  // Per outgoing link (this node's state to a peer), and per peer sending here.
  using Link = protocol::PeerLinkStatus;
  using Peer = protocol::PeerNodeStatus;
  const std::pair<Scalar, double (*)(const Link&)> link_families[] = {
      {{"tally_gossip_link_up", "1 while the link to the peer is connected and past its hello", 0},
       [](const Link& l) { return l.up ? 1.0 : 0.0; }},
      {{"tally_gossip_link_sent_bytes_total", "Bytes this node sent on the link", 0},
       [](const Link& l) { return static_cast<double>(l.bytes_sent); }},
      {{"tally_gossip_link_queued_bytes", "Bytes waiting to be sent on the link", 0},
       [](const Link& l) { return static_cast<double>(l.queued_bytes); }},
      {{"tally_gossip_link_full_syncs_sent_total", "Full syncs this node sent on the link", 0},
       [](const Link& l) { return static_cast<double>(l.full_syncs_sent); }},
      {{"tally_gossip_link_connects_total", "Times the link connected", 0},
       [](const Link& l) { return static_cast<double>(l.connects); }},
      {{"tally_gossip_link_lag_seconds",
        "How long the peer has lacked some of what this node sent it (0: nothing queued)", 0},
       [](const Link& l) { return Seconds(l.lag_ms); }},
  };
  for (const auto& [family, value_of] : link_families) {
    f->Named(family.name, family.help);
    for (const Link& link : s.peer_links) {
      f->Add(value_of(link), {{"address", link.address}, {"node", std::to_string(link.node_id)}});
    }
  }
  const std::pair<Scalar, double (*)(const Peer&)> peer_families[] = {
      {{"tally_gossip_peer_connected", "1 while the peer has a session open to this node", 0},
       [](const Peer& p) { return p.connected ? 1.0 : 0.0; }},
      {{"tally_gossip_peer_last_heard_seconds", "Time since the peer last sent anything", 0},
       [](const Peer& p) { return Seconds(p.last_heard_ms_ago); }},
      {{"tally_gossip_peer_full_syncs_received_total", "Full syncs received from the peer", 0},
       [](const Peer& p) { return static_cast<double>(p.full_syncs); }},
      {{"tally_gossip_peer_merged_entries_total", "Entries from the peer merged here", 0},
       [](const Peer& p) { return static_cast<double>(p.entries_merged); }},
  };
  for (const auto& [family, value_of] : peer_families) {
    f->Named(family.name, family.help);
    for (const Peer& peer : s.peer_nodes) {
      f->Add(value_of(peer), {{"node", std::to_string(peer.node_id)}});
    }
  }

  // Members, as this node sees them (itself included).
  constexpr std::array<protocol::MemberState, 4> kStates = {
      protocol::MemberState::kAlive, protocol::MemberState::kSuspect, protocol::MemberState::kDead,
      protocol::MemberState::kLeft};
  if (!s.members.empty()) {
    f->Gauge("tally_members", "Members in each state, this node included");
    for (const protocol::MemberState state : kStates) {
      const auto in_state =
          std::count_if(s.members.begin(), s.members.end(),
                        [&](const auto& member) { return member.state == state; });
      f->Add(static_cast<double>(in_state), {{"state", std::string(MemberStateName(state))}});
    }
  }
  f->Gauge("tally_member_state", "1 for the state each member is in, 0 for the others");
  for (const protocol::MemberStatus& member : s.members) {
    for (const protocol::MemberState state : kStates) {
      f->Add(member.state == state ? 1 : 0, {{"address", member.address},
                                             {"node", std::to_string(member.node_id)},
                                             {"state", std::string(MemberStateName(state))}});
    }
  }
  f->Gauge("tally_member_heartbeat_lag_seconds",
           "Age of the member's last probe or ack when it arrived (clock skew included)");
  for (const protocol::MemberStatus& member : s.members) {
    f->Add(static_cast<double>(member.lag_ms) / 1'000.0,
           {{"node", std::to_string(member.node_id)}});
  }
  // What --max-clock-offset-ms bounds (tallyd warns past it), for alerts: a
  // series only for members heard from directly.
  f->Gauge("tally_member_clock_offset_seconds",
           "The member's wall clock minus this node's, estimated from its probes and acks");
  for (const protocol::MemberStatus& member : s.members) {
    if (!member.clock_offset_known) continue;
    f->Add(static_cast<double>(member.clock_offset_ms) / 1'000.0,
           {{"node", std::to_string(member.node_id)}});
  }
  f->Gauge("tally_member_last_heard_seconds", "Time since a message from the member last arrived");
  for (const protocol::MemberStatus& member : s.members) {
    f->Add(Seconds(member.last_heard_ms_ago), {{"node", std::to_string(member.node_id)}});
  }
}

}  // namespace tally::metrics
