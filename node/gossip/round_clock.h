// RoundClock: when a node's next gossip round is due, for the daemon's round
// coroutine (gossip.cc) and the simulation's events (node/sim) alike.
//
// A round comes every interval_ms. It comes sooner when a key near its limit
// asks (BringForward). It
// comes later when the last round found nothing to do: it rests until the
// next thing it waits for (a ping, a deferred admission, anti-entropy),
// unless work comes first (EndRest), which puts the next round back an
// interval after the last. Times are in ms of one monotonic clock of the
// caller's choosing.
//
// Thread safety: none; the owner's thread only (the daemon's gossip thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace tally {

class RoundClock {
 public:
  // An early round comes no sooner than interval_ms / this after the last.
  static constexpr int64_t kEarlyRoundDivisor = 10;

  // The first round comes an interval after now_ms.
  RoundClock(int64_t interval_ms, int64_t now_ms)
      : interval_ms_(interval_ms), last_round_ms_(now_ms), next_round_ms_(now_ms + interval_ms) {}

  // A round begins at now_ms: the next comes an interval later, unless End lets it rest.
  void Begin(int64_t now_ms) {
    last_round_ms_ = now_ms;
    next_round_ms_ = now_ms + interval_ms_;
    resting_ = true;
  }
  // The round that began last is over. busy: it sent something, or must
  // not rest (a link down, a probe under way, the node leaving). Otherwise
  // it rests until the soonest of waits_ms (from its beginning), when that
  // is later than the next interval and no work came meanwhile.
  void End(bool busy, std::initializer_list<int64_t> waits_ms) {
    int64_t rest_ms = busy || waits_ms.size() == 0 ? 0 : INT64_MAX;
    for (const int64_t wait_ms : waits_ms)
      rest_ms = std::min(rest_ms, std::max<int64_t>(0, wait_ms));
    if (rest_ms > interval_ms_ && resting_) {
      next_round_ms_ = last_round_ms_ + rest_ms;
    } else {
      resting_ = false;
    }
  }
  // Work came: no rest; the next round an interval after the last, or now
  // if that has passed. Whether the next round came sooner.
  bool EndRest(int64_t now_ms) {
    resting_ = false;
    return MoveSooner(std::max(now_ms, last_round_ms_ + interval_ms_));
  }
  // An early round: no sooner than interval_ms / kEarlyRoundDivisor after
  // the last, nor before now. Whether the next round came sooner.
  bool BringForward(int64_t now_ms) {
    return MoveSooner(
        std::max(now_ms, last_round_ms_ + std::max<int64_t>(1, interval_ms_ / kEarlyRoundDivisor)));
  }

  int64_t next_round_at_ms() const { return next_round_ms_; }
  // The last round found nothing to do, and no work came since.
  bool resting() const { return resting_; }

 private:
  bool MoveSooner(int64_t due_ms) {
    if (due_ms >= next_round_ms_) return false;
    next_round_ms_ = due_ms;
    return true;
  }

  int64_t interval_ms_;
  int64_t last_round_ms_;
  int64_t next_round_ms_;
  bool resting_ = false;
};

}  // namespace tally
