#include "cluster/cpu_usage.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace tally::cluster {

Status ProcessCpuSeconds(pid_t pid, double* seconds) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return Status::IOError("cannot read " + path);
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the
  // fields are counted from the last ')'. After it come field 3 (state)
  // onwards; utime and stime are fields 14 and 15.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return Status::IOError("no command name in " + path);
  std::istringstream fields(line.substr(close + 1));
  std::string skipped;
  for (int field = 3; field <= 13; ++field) fields >> skipped;
  unsigned long long user_ticks = 0, system_ticks = 0;
  if (!(fields >> user_ticks >> system_ticks)) return Status::IOError("short line in " + path);
  *seconds =
      static_cast<double>(user_ticks + system_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return Status::OK();
}

}  // namespace tally::cluster
