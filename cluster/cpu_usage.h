// The CPU time a process has used, from /proc/<pid>/stat: user + system time
// of all its threads, in seconds (the kernel counts it in clock ticks,
// sysconf(_SC_CLK_TCK) per second, so it has that resolution, 10 ms on most
// systems). For benchmarks that compare what processes spend rather than how
// fast they go: CPU time does not depend on how many cores they shared.
//
// Thread safety: none needed; reads a file.
#pragma once

#include <sys/types.h>

#include "node/common/status.h"

namespace tally::cluster {

// IOError when the process is gone or its stat line cannot be read.
Status ProcessCpuSeconds(pid_t pid, double* seconds);

}  // namespace tally::cluster
