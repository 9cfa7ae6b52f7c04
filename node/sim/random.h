// Random: the simulation's one source of randomness (xoshiro256**, seeded by
// splitmix64). Its draws are integer arithmetic of its own, not the standard
// library's distributions, so that a seed gives the same run bit for bit on
// every build.
//
// Thread safety: none (the simulation is single-threaded).
#pragma once

#include <cstdint>

namespace tally::sim {

class Random {
 public:
  explicit Random(uint64_t seed) {
    for (uint64_t& word : state_) word = SplitMix(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }
  // Uniform in [0, n); n > 0.
  uint64_t Below(uint64_t n) { return static_cast<uint64_t>((__uint128_t{Next()} * n) >> 64); }
  // Uniform in [lo, hi].
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
  }
  // Uniform in [0, 1), 53 bits.
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  bool Chance(double p) { return p > 0 && Unit() < p; }
  // A draw of an exponential distribution of the given mean, in whole ms (at least 1).
  int64_t ExponentialMs(double mean_ms);

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }
  uint64_t state_[4];
};

}  // namespace tally::sim
