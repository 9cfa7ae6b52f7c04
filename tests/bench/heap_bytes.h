// The heap in use by this process, as glibc's malloc counts it (the benchmarks
// that measure memory per key do not link tcmalloc).
#pragma once

#include <malloc.h>

#include <cstddef>

namespace tally::bench {

// Bytes handed out by malloc and not yet freed, large blocks included.
inline size_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

}  // namespace tally::bench
