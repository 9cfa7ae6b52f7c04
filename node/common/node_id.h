// NodeId: the identity of one tally node in a cluster (--node-id, or a random
// one recorded in the data directory on first start). 0 is never a node's id.
#pragma once

#include <cstdint>

namespace tally {

using NodeId = uint64_t;

}  // namespace tally
