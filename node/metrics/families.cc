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

void Families::Counter(const std::string& name, const std::string& help, double value) {
  Counter(name, help);
  Add(value);
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

void AddStatsFamilies(const protocol::StatsReply& s, Families* f) {
  f->Gauge("tally_uptime_seconds", "Time since the node started", Seconds(s.uptime_ms));
  f->Gauge("tally_keys", "Keys (limits of a key) held in memory", static_cast<double>(s.keys));
  f->Gauge("tally_connections_open", "Client connections open, on every front's port",
           static_cast<double>(s.connections_open));
  f->Counter("tally_connections_accepted_total", "Client connections accepted",
             static_cast<double>(s.connections_total));

  f->Gauge("tally_restore_duration_seconds", "How long the node took to restore its counters",
           Seconds(s.restore_ms));
  f->Gauge("tally_restored_keys", "Keys restored from disk at start",
           static_cast<double>(s.keys_restored));
  f->Counter("tally_storage_flushes_total", "Runs of changed counters written to RocksDB",
             static_cast<double>(s.storage_flushes));
  f->Counter("tally_storage_checkpoints_total", "Checkpoints written (every live key)",
             static_cast<double>(s.storage_checkpoints));
  f->Counter("tally_storage_written_keys_total", "Keys written in flushes and checkpoints",
             static_cast<double>(s.storage_keys_written));
  f->Counter("tally_storage_write_errors_total", "Writes to RocksDB that failed",
             static_cast<double>(s.storage_write_errors));
  f->Gauge("tally_storage_disk_bytes", "Size of the data directory",
           static_cast<double>(s.storage_disk_bytes));
  f->Gauge("tally_storage_degraded",
           "1 while the last write failed and the node serves from memory",
           s.storage_degraded ? 1 : 0);

  f->Gauge("tally_policy_domains", "Domains in the policies in force",
           static_cast<double>(s.policy_domains));
  f->Gauge("tally_policy_rules", "Limits in the policies in force",
           static_cast<double>(s.policy_rules));
  f->Counter("tally_policy_reloads_total", "Policy sets that took effect, the first included",
             static_cast<double>(s.policy_reloads));
  f->Counter("tally_policy_reload_failures_total",
             "Policy reloads refused (the previous set stayed)",
             static_cast<double>(s.policy_reload_failures));
  f->Counter("tally_grpc_calls_total", "ShouldRateLimit calls answered with an OK status",
             static_cast<double>(s.grpc_requests));
  f->Counter("tally_grpc_over_limit_calls_total", "ShouldRateLimit calls answered OVER_LIMIT",
             static_cast<double>(s.grpc_over_limit));
  f->Counter("tally_grpc_refused_calls_total", "ShouldRateLimit calls answered with an error",
             static_cast<double>(s.grpc_refused));

  f->Gauge("tally_recovery_duration_seconds",
           "How long the node waited at start for its peers' full syncs", Seconds(s.recovery_ms));
  f->Gauge("tally_recovery_synced_peers", "Peers whose full sync arrived during that wait",
           static_cast<double>(s.recovery_peers_synced));
  struct Total {
    const char* name;
    const char* help;
    uint64_t value;
  };
  const std::array<Total, 10> gossip = {{
      {"rounds", "Gossip rounds (a delta to every link each interval)", s.gossip_rounds},
      {"sent_bytes", "Bytes sent on every gossip link", s.gossip_bytes_sent},
      {"received_bytes", "Bytes received from every peer", s.gossip_bytes_received},
      {"delta_sent_bytes", "Bytes of delta frames sent, summed over the links",
       s.gossip_delta_bytes_sent},
      {"delta_sent_entries", "Key entries in delta frames sent, summed over the links",
       s.gossip_delta_entries_sent},
      {"full_syncs_sent", "Full syncs sent to peers", s.gossip_full_syncs_sent},
      {"full_syncs_received", "Full syncs received from peers", s.gossip_full_syncs_received},
      {"merged_entries", "Entries from peers merged into the engine", s.gossip_entries_merged},
      {"rejected_entries", "Entries from peers the engine refused (bad key, order, skew, cap)",
       s.gossip_entries_rejected},
      {"refused_sessions", "Gossip sessions closed for garbage, a bad hello or silence",
       s.gossip_sessions_refused},
  }};
  for (const Total& total : gossip) {
    f->Counter(std::string("tally_gossip_") + total.name + "_total", total.help,
               static_cast<double>(total.value));
  }

  // Per outgoing link: this node's state to a peer.
  const auto link_labels = [](const protocol::PeerLinkStatus& link) {
    return Labels{{"address", link.address}, {"node", std::to_string(link.node_id)}};
  };
  const std::vector<std::pair<std::string, std::string>> link_families = {
      {"tally_gossip_link_up", "1 while the link to the peer is connected and past its hello"},
      {"tally_gossip_link_sent_bytes_total", "Bytes this node sent on the link"},
      {"tally_gossip_link_queued_bytes", "Bytes waiting to be sent on the link"},
      {"tally_gossip_link_full_syncs_sent_total", "Full syncs this node sent on the link"},
      {"tally_gossip_link_connects_total", "Times the link connected"},
      {"tally_gossip_link_lag_seconds",
       "How long the peer has lacked some of what this node sent it (0: nothing queued)"},
  };
  for (size_t which = 0; which < link_families.size(); ++which) {
    const auto& [name, help] = link_families[which];
    if (name.ends_with("_total")) {
      f->Counter(name, help);
    } else {
      f->Gauge(name, help);
    }
    for (const protocol::PeerLinkStatus& link : s.peer_links) {
      const std::array<double, 6> values = {link.up ? 1.0 : 0.0,
                                            static_cast<double>(link.bytes_sent),
                                            static_cast<double>(link.queued_bytes),
                                            static_cast<double>(link.full_syncs_sent),
                                            static_cast<double>(link.connects),
                                            Seconds(link.lag_ms)};
      f->Add(values[which], link_labels(link));
    }
  }

  // Per peer node whose state this node receives.
  f->Gauge("tally_gossip_peer_connected", "1 while the peer has a session open to this node");
  for (const auto& peer : s.peer_nodes) {
    f->Add(peer.connected ? 1 : 0, {{"node", std::to_string(peer.node_id)}});
  }
  f->Gauge("tally_gossip_peer_last_heard_seconds", "Time since the peer last sent anything");
  for (const auto& peer : s.peer_nodes) {
    f->Add(Seconds(peer.last_heard_ms_ago), {{"node", std::to_string(peer.node_id)}});
  }
  f->Counter("tally_gossip_peer_full_syncs_received_total", "Full syncs received from the peer");
  for (const auto& peer : s.peer_nodes) {
    f->Add(static_cast<double>(peer.full_syncs), {{"node", std::to_string(peer.node_id)}});
  }
  f->Counter("tally_gossip_peer_merged_entries_total", "Entries from the peer merged here");
  for (const auto& peer : s.peer_nodes) {
    f->Add(static_cast<double>(peer.entries_merged), {{"node", std::to_string(peer.node_id)}});
  }

  // Members, as this node sees them (itself included).
  constexpr std::array<protocol::MemberState, 4> kStates = {
      protocol::MemberState::kAlive, protocol::MemberState::kSuspect, protocol::MemberState::kDead,
      protocol::MemberState::kLeft};
  if (!s.members.empty()) {
    f->Gauge("tally_members", "Members in each state, this node included");
    for (const protocol::MemberState state : kStates) {
      const auto count = std::count_if(s.members.begin(), s.members.end(),
                                       [&](const auto& member) { return member.state == state; });
      f->Add(static_cast<double>(count), {{"state", std::string(MemberStateName(state))}});
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
           "Age of the member's last heartbeat when it arrived (clock skew included)");
  for (const protocol::MemberStatus& member : s.members) {
    f->Add(static_cast<double>(member.lag_ms) / 1'000.0,
           {{"node", std::to_string(member.node_id)}});
  }
  f->Gauge("tally_member_last_heard_seconds", "Time since the member's heartbeat last advanced");
  for (const protocol::MemberStatus& member : s.members) {
    f->Add(Seconds(member.last_heard_ms_ago), {{"node", std::to_string(member.node_id)}});
  }
}

}  // namespace tally::metrics
