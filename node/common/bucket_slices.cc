#include "node/common/bucket_slices.h"

#include <algorithm>
#include <cstddef>
#include <limits>

namespace tally {
namespace {

__extension__ typedef unsigned __int128 u128;  // sums of counts times window_ms

constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

uint64_t Saturate(u128 value) { return value > kMaxU64 ? kMaxU64 : static_cast<uint64_t>(value); }

// x - y, or 0 when y >= x.
u128 Minus(u128 x, u128 y) { return x > y ? x - y : 0; }

// The terms whose maximum is the debt: each is `amount` token-ms at `from_ms`
// and falls by `rate` per ms from then on (node/common/bucket_slices.h).
struct Term {
  u128 amount = 0;
  int64_t from_ms = 0;
};

int64_t KeptSlices(const BucketSlices& state) {
  size_t kept = 0;
  for (const NodeSlices& node : state.nodes) kept = std::max(kept, node.counts.size());
  return static_cast<int64_t>(std::min<size_t>(kept, kBucketMaxSlices));
}

// The base's term and one term per kept slice before `end` (index from the
// base): its cost and every later slice's, charged at the slice's end.
// `extra` tokens count in slice `extra_index` (as if admitted there now).
int64_t Terms(const BucketSlices& state, uint64_t window_ms, int64_t end, uint64_t extra,
              int64_t extra_index, Term* terms) {
  u128 per_slice[kBucketMaxSlices] = {};
  for (const NodeSlices& node : state.nodes) {
    const auto n = std::min<int64_t>(end, static_cast<int64_t>(node.counts.size()));
    for (int64_t i = 0; i < n; ++i) per_slice[i] += node.counts[static_cast<size_t>(i)];
  }
  if (extra > 0) {
    extra_index = std::clamp<int64_t>(extra_index, 0, kBucketMaxSlices - 1);
    per_slice[extra_index] += extra;
    end = std::max(end, extra_index + 1);
  }
  const auto slice_ms = static_cast<int64_t>(BucketSliceMs(window_ms));
  u128 suffix = 0;
  for (int64_t k = end - 1; k >= 0; --k) {
    suffix += per_slice[k];
    terms[k + 1] = {suffix * window_ms, (state.base_slice + k + 1) * slice_ms};
  }
  terms[0] = {static_cast<u128>(state.base_debt) + suffix * window_ms, state.base_slice * slice_ms};
  return end + 1;
}

// BucketFullAtMs's bound: far enough that adding a wait to it cannot overflow.
constexpr u128 kMaxFullAtMs = std::numeric_limits<int64_t>::max() / 2;

// When the last slice with a cost is folded (the base passes it two periods
// on): 0 when no slice holds a cost.
u128 FoldedAtMs(const BucketSlices& state, uint64_t window_ms) {
  int64_t last_slice = state.base_slice - 1;
  for (const NodeSlices& node : state.nodes) {
    for (size_t i = node.counts.size(); i-- > 0;) {
      if (node.counts[i] == 0) continue;
      last_slice = std::max(last_slice, state.base_slice + static_cast<int64_t>(i));
      break;
    }
  }
  if (last_slice < state.base_slice) return 0;
  const int64_t folded_slice = (last_slice / kBucketSlicesPerPeriod + 2) * kBucketSlicesPerPeriod;
  return static_cast<u128>(folded_slice) * BucketSliceMs(window_ms);
}

u128 DebtOf(const Term* terms, int64_t count, uint64_t rate, int64_t now_ms) {
  u128 debt = 0;
  for (int64_t i = 0; i < count; ++i) {
    const u128 refill =
        now_ms > terms[i].from_ms ? static_cast<u128>(now_ms - terms[i].from_ms) * rate : 0;
    debt = std::max(debt, Minus(terms[i].amount, refill));
  }
  return debt;
}

}  // namespace

uint64_t BucketSliceMs(uint64_t window_ms) {
  return std::max<uint64_t>(1, window_ms / kBucketSlicesPerWindow);
}

int64_t BucketSliceAt(uint64_t window_ms, int64_t now_ms) {
  return now_ms / static_cast<int64_t>(BucketSliceMs(window_ms));
}

int64_t BucketBaseFor(int64_t slice) {
  return std::max<int64_t>(0, (slice / kBucketSlicesPerPeriod - 1) * kBucketSlicesPerPeriod);
}

uint64_t BucketDebt(const BucketSlices& state, uint64_t capacity, uint64_t window_ms,
                    int64_t now_ms, uint64_t extra) {
  Term terms[kBucketMaxSlices + 1];
  const int64_t count = Terms(state, window_ms, KeptSlices(state), extra,
                              BucketSliceAt(window_ms, now_ms) - state.base_slice, terms);
  return Saturate(DebtOf(terms, count, capacity, now_ms));
}

uint64_t BucketWaitMs(const BucketSlices& state, uint64_t capacity, uint64_t window_ms,
                      int64_t now_ms, uint64_t extra, uint64_t target_debt) {
  if (capacity == 0) return 0;
  Term terms[kBucketMaxSlices + 1];
  const int64_t count = Terms(state, window_ms, KeptSlices(state), extra,
                              BucketSliceAt(window_ms, now_ms) - state.base_slice, terms);
  u128 until_ms = static_cast<u128>(std::max<int64_t>(now_ms, 0));
  for (int64_t i = 0; i < count; ++i) {
    if (terms[i].amount <= target_debt) continue;
    const u128 falls_ms = (terms[i].amount - target_debt + capacity - 1) / capacity;
    until_ms =
        std::max(until_ms, static_cast<u128>(std::max<int64_t>(terms[i].from_ms, 0)) + falls_ms);
  }
  return Saturate(until_ms - static_cast<u128>(std::max<int64_t>(now_ms, 0)));
}

int64_t BucketFullAtMs(const BucketSlices& state, uint64_t window_ms) {
  const int64_t from_ms = state.base_slice * static_cast<int64_t>(BucketSliceMs(window_ms));
  const uint64_t wait_ms =
      BucketWaitMs(state, std::max<uint64_t>(state.capacity, 1), window_ms, from_ms, 0, 0);
  return static_cast<int64_t>(std::min<u128>(
      std::max(static_cast<u128>(from_ms) + wait_ms, FoldedAtMs(state, window_ms)), kMaxFullAtMs));
}

bool BucketFullBy(const BucketSlices& state, uint64_t window_ms, int64_t now_ms) {
  // BucketFullAtMs is at least the capped fold time, which needs no terms.
  if (now_ms >= 0 &&
      std::min<u128>(FoldedAtMs(state, window_ms), kMaxFullAtMs) > static_cast<u128>(now_ms)) {
    return false;
  }
  return BucketFullAtMs(state, window_ms) <= now_ms;
}

void FoldBucket(BucketSlices& state, uint64_t window_ms, int64_t base_slice) {
  if (base_slice <= state.base_slice) return;
  const int64_t folded = std::min(base_slice - state.base_slice, kBucketMaxSlices);
  const auto start_ms =
      static_cast<int64_t>(std::min<u128>(static_cast<u128>(base_slice) * BucketSliceMs(window_ms),
                                          std::numeric_limits<int64_t>::max()));
  Term terms[kBucketMaxSlices + 1];
  const int64_t term_count = Terms(state, window_ms, folded, 0, 0, terms);
  state.base_debt = Saturate(DebtOf(terms, term_count, state.capacity, start_ms));
  state.base_slice = base_slice;
  for (NodeSlices& node : state.nodes) {
    const auto drop = std::min<size_t>(static_cast<size_t>(folded), node.counts.size());
    node.counts.erase(node.counts.begin(), node.counts.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  std::erase_if(state.nodes, [](const NodeSlices& node) {
    return std::all_of(node.counts.begin(), node.counts.end(),
                       [](uint32_t count) { return count == 0; });
  });
}

void AddToBucket(BucketSlices& state, NodeId node, int64_t slice, uint64_t cost) {
  const auto index =
      static_cast<size_t>(std::clamp<int64_t>(slice - state.base_slice, 0, kBucketMaxSlices - 1));
  auto it = std::lower_bound(state.nodes.begin(), state.nodes.end(), node,
                             [](const NodeSlices& slices, NodeId id) { return slices.node < id; });
  if (it == state.nodes.end() || it->node != node) it = state.nodes.insert(it, {node, {}});
  if (it->counts.size() <= index) it->counts.resize(index + 1, 0);
  const uint64_t sum = uint64_t{it->counts[index]} + cost;
  it->counts[index] =
      static_cast<uint32_t>(std::min<uint64_t>(sum, std::numeric_limits<uint32_t>::max()));
}

uint64_t MergeBucket(BucketSlices& state, const BucketSlices& from, uint64_t window_ms) {
  if (from.base_slice < state.base_slice) {
    BucketSlices folded = from;
    FoldBucket(folded, window_ms, state.base_slice);
    return MergeBucket(state, folded, window_ms);
  }
  FoldBucket(state, window_ms, from.base_slice);
  state.capacity = std::max(state.capacity, from.capacity);
  u128 added = Minus(from.base_debt, state.base_debt);
  state.base_debt = std::max(state.base_debt, from.base_debt);
  for (const NodeSlices& incoming : from.nodes) {
    const size_t n = std::min<size_t>(incoming.counts.size(), kBucketMaxSlices);
    if (std::all_of(incoming.counts.begin(),
                    incoming.counts.begin() + static_cast<std::ptrdiff_t>(n),
                    [](uint32_t count) { return count == 0; })) {
      continue;
    }
    auto it =
        std::lower_bound(state.nodes.begin(), state.nodes.end(), incoming.node,
                         [](const NodeSlices& slices, NodeId id) { return slices.node < id; });
    if (it == state.nodes.end() || it->node != incoming.node) {
      it = state.nodes.insert(it, {incoming.node, {}});
    }
    if (it->counts.size() < n) it->counts.resize(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (incoming.counts[i] <= it->counts[i]) continue;
      added += static_cast<u128>(incoming.counts[i] - it->counts[i]) * window_ms;
      it->counts[i] = incoming.counts[i];
    }
  }
  return Saturate(added);
}

uint64_t BucketCostIn(const NodeSlices& node, int64_t base_slice, int64_t first, int64_t end) {
  uint64_t cost = 0;
  for (int64_t slice = std::max(first, base_slice); slice < end; ++slice) {
    const auto index = static_cast<size_t>(slice - base_slice);
    if (index >= node.counts.size()) break;
    cost += node.counts[index];
  }
  return cost;
}

}  // namespace tally
