#include "storage/disk_space.h"

#include <sys/statvfs.h>

namespace tally::storage {

std::optional<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs disk {};
  if (statvfs(path.c_str(), &disk) != 0) return std::nullopt;
  return static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
}

}  // namespace tally::storage
