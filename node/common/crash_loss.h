// CrashLoss: a member restarted without its previous run having left, so
// whatever that run admitted and had neither sent nor written may be lost
// (node/gossip/member_losses.h says who notes one and how it counts).
//
// Losses are replicated state: every node stores the ones it knows with its
// data and gossips them in its membership table, so that every node, the
// restarted one included, decides by the same allowance. One loss is one
// (node_id, incarnation) pair, the incarnation of the run that started after
// it; copies merge by keeping the earliest at_ms (every noting time is after
// the crash, and the earliest lets the allowance end soonest).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "node/common/node_id.h"

namespace tally {

struct CrashLoss {
  NodeId node_id = 0;
  // The run that started after the loss; for a member an operator forgot
  // (gone for good), the forgotten run.
  uint64_t incarnation = 0;
  int64_t at_ms = 0;  // wall clock when a node first noted it; never negative
  friend bool operator==(const CrashLoss&, const CrashLoss&) = default;
};

// The most losses a node keeps, stores and gossips; beyond it the oldest go.
// Each counts a headroom share of every limit for up to two windows, so a
// few hundred together would count whole limits as spent anyway.
inline constexpr size_t kMaxCrashLosses = 64;

// The bytes a node stores its losses as (storage/store.h), varints.
std::string EncodeCrashLosses(std::span<const CrashLoss> losses);
// False for bytes EncodeCrashLosses did not write (more than kMaxCrashLosses
// included); *losses is then left empty.
bool DecodeCrashLosses(std::string_view bytes, std::vector<CrashLoss>* losses);

}  // namespace tally
