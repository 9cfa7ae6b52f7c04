// What /proc says about another process: the CPU time it has used and its
// resident memory. Linux only.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/types.h>

namespace tally::testing {

// User plus system CPU time of `pid` so far, in ms; -1 when it cannot be read.
inline int64_t CpuTimeMs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');  // the command name may hold spaces
  if (name_end == std::string::npos) return -1;
  std::istringstream fields(stat.substr(name_end + 2));
  std::string field;
  // After the name: state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i < 14; ++i) fields >> field;
  int64_t user_ticks = 0, system_ticks = 0;
  if (!(fields >> user_ticks >> system_ticks)) return -1;
  return (user_ticks + system_ticks) * 1'000 / sysconf(_SC_CLK_TCK);
}

// VmRSS of `pid`, in KiB; -1 when it cannot be read.
inline int64_t ResidentKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

}  // namespace tally::testing
