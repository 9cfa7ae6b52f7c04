// Mix64: a 64-bit mix (the finaliser of SplitMix64) for choices that every
// node must make alike from the same input (a key's relayer, an epoch's
// rounding offset). Every input bit moves every output bit.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>

namespace tally {

inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace tally
