// host:port, the one text form of an address tally dials or advertises:
// tallyd's --seed and --gossip-advertise, the members' addresses gossip
// dials, tally-loadgen's --address.
//
// Grammar: host ":" port. The host is a name or an IPv4 literal (no ':'), or
// an IPv6 literal in brackets: "[::1]:7421". An IPv6 literal without
// brackets ("::1:7421") is refused, since its last group cannot be told from
// a port. The port is decimal digits with a value in 1..65535 (0 picks a
// port when listening but is never a place to dial). Names are not resolved
// here.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "node/common/status.h"

namespace tally {

struct HostPort {
  std::string host;  // without brackets: "::1", "10.0.0.1", "tally-seeds"
  uint16_t port = 0;
};

// Parses `text` into *out. InvalidArgument quoting `text` and saying what is
// wrong (no port, no host, a port out of range, ...); *out is then unchanged.
Status ParseHostPort(std::string_view text, HostPort* out);

// The text form ParseHostPort reads back: brackets around a host holding ':'.
std::string FormatHostPort(std::string_view host, uint16_t port);

}  // namespace tally
