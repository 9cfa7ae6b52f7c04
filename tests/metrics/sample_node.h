// A node's numbers with every kind of series filled in, for the tests of
// Metrics::Render: two fronts, two named policy domains and one beyond the
// named slots, a cluster of three with links, peers and members.
#pragma once

#include <string>
#include <vector>

#include "node/common/front_counters.h"
#include "node/common/readiness.h"
#include "node/metrics/metrics.h"
#include "protocol/messages.h"

namespace tally::testing {

struct SampleNode {
  SampleNode() {
    // protocol: 3 checks with their own limit (2 allowed, 1 denied), one
    // request timed at 3 us; 2 checks in domain "api" (1 error, 1 shadow denial).
    protocol.Count(0, FrontCounters::kNoDomain, {.allowed = 2, .denied = 1});
    protocol.RecordLatency(0, 3'000);
    protocol.Count(1, 1, {.allowed = 1, .errors = 1, .shadow_denied = 1});
    protocol.RecordLatency(1, 2'000'000'000);  // 2 s: beyond the last bound
    // grpc: "edge" (slot 2) 5 denied and 2 allowed over quota-mode limits; a
    // domain beyond the named slots, 1 allowed.
    grpc.Count(FrontCounters::ThreadStripe(), 2, {.allowed = 2, .denied = 5, .quota_exceeded = 2});
    grpc.Count(FrontCounters::ThreadStripe(), FrontCounters::kOtherDomain, {.allowed = 1});
    grpc.RecordLatency(FrontCounters::ThreadStripe(), 40'000);

    stats.uptime_ms = 12'500;
    stats.keys = 1'000'000;
    stats.storage_disk_bytes = 4096;
    stats.storage_degraded = true;
    stats.gossip_rounds = 77;
    protocol::PeerLinkStatus link;
    link.address = "10.0.0.2:7421";
    link.up = true;
    link.node_id = 2;
    link.queued_bytes = 100;
    link.lag_ms = 250;
    stats.peer_links.push_back(link);
    link.address = "node-3.tally \"quoted\":7421";  // label values are escaped
    link.up = false;
    link.node_id = 3;
    link.lag_ms = 0;
    stats.peer_links.push_back(link);
    protocol::PeerNodeStatus peer;
    peer.node_id = 2;
    peer.connected = true;
    peer.last_heard_ms_ago = 20;
    peer.full_syncs = 1;
    stats.peer_nodes.push_back(peer);
    protocol::MemberStatus member;
    member.node_id = 1;
    member.address = "10.0.0.1:7421";
    stats.members.push_back(member);
    member.node_id = 2;
    member.address = "10.0.0.2:7421";
    member.lag_ms = 3;
    member.clock_offset_known = true;
    member.clock_offset_ms = -42;
    stats.members.push_back(member);
    member.clock_offset_known = false;
    member.node_id = 3;
    member.address = "node-3.tally:7421";
    member.state = protocol::MemberState::kDead;
    stats.members.push_back(member);
    readiness.SetReady();
  }

  Metrics::Sources Sources() {
    return Metrics::Sources{.stats = [this] { return stats; },
                            .domain_names =
                                [] {
                                  return std::vector<std::string>{"", "api", "edge"};
                                },
                            .rule_series = [] { return rules; },
                            .readiness = &readiness};
  }

  // Checks by policy rule: a rule with a value in its name, a shared
  // wildcard, and the series past the cap.
  static inline const RuleSeries rules = {
      {"edge.remote_address_10.0.0.1", {.allowed = 3, .denied = 1}},
      {"edge.files_files/*", {.allowed = 2, .shadow_denied = 1, .quota_exceeded = 1}},
      {"_other", {.allowed = 7, .errors = 1}}};

  FrontCounters protocol{2, FrontCounters::Writers::kOnePerStripe};
  FrontCounters grpc{FrontCounters::kThreadStripes, FrontCounters::Writers::kAny};
  protocol::StatsReply stats;
  Readiness readiness;
};

}  // namespace tally::testing
