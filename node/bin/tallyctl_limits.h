// How tallyctl shows what inspect answers: one limit of a key (key,
// algorithm, window_ms) as one node holds it, every node's counts in it.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "protocol/messages.h"

namespace tally::bin {

// The answer of the node at `target` as lines of text: the node and the
// limit, then per node its counts (counting algorithms: current and previous
// window; log: cost and stamps in the window) and their sum; the token
// bucket's tokens and how long ago (by now_ms, this machine's wall clock)
// the node last refilled it.
std::string InspectText(std::string_view target, const protocol::KeyLimit& limit,
                        const protocol::InspectReply& reply, int64_t now_ms);

// The same as one JSON object.
nlohmann::ordered_json InspectJson(std::string_view target, const protocol::KeyLimit& limit,
                                   const protocol::InspectReply& reply);

}  // namespace tally::bin
