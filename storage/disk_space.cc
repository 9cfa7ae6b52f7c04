#include "storage/disk_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <sys/statvfs.h>

namespace tally::storage {

std::optional<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs disk {};
  if (statvfs(path.c_str(), &disk) != 0) return std::nullopt;
  return static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
}

Status MakeReserve(const std::string& file, uint64_t bytes) {
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot create " + file + ": " + std::strerror(errno));
  // The size first (a reserve once larger shrinks), then the blocks not yet allocated.
  const int error = ftruncate(fd, static_cast<off_t>(bytes)) != 0
                        ? errno
                        : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  close(fd);
  if (error == 0) return Status::OK();
  unlink(file.c_str());
  return Status::IOError("cannot reserve " + std::to_string(bytes) + " bytes in " + file + ": " +
                         std::strerror(error));
}

bool ReleaseReserve(const std::string& file) { return unlink(file.c_str()) == 0; }

}  // namespace tally::storage
