// DescriptorEntry: one (key, value) pair of a rate-limit descriptor, as
// Envoy and envoyproxy/ratelimit name what is limited ("remote_address" =
// "10.0.0.1"). A descriptor is a list of them; a request by policy names a
// domain and one or more descriptors (node/policy/policy.h).
//
// Ownership: views into memory the caller owns (a decoded frame, a gRPC
// message), valid for the call they are passed to.
#pragma once

#include <string_view>

namespace tally {

struct DescriptorEntry {
  std::string_view key;
  std::string_view value;
};

}  // namespace tally
