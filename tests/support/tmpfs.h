// Small file systems for the tests of full disks: a tmpfs mounted for one
// test, resized, and filled up to a chosen free space.
//
// Mounting needs root (CAP_SYS_ADMIN): a test skips, with a MESSAGE naming
// the error, when mounted() is false.
//
// Thread safety: none; owned by one test.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include <sys/mount.h>
#include <sys/statvfs.h>

namespace tally::testing {

// A tmpfs mounted on `directory` (created) until destruction. Declare it
// before the stores and processes that use it, so that they are gone before
// the unmount.
class TmpfsMount {
 public:
  // `options` as mount(8) takes them, e.g. "size=40m".
  TmpfsMount(const std::string& directory, const std::string& options, unsigned long flags = 0)
      : directory_(directory) {
    std::filesystem::create_directories(directory_);
    mounted_ = mount("tmpfs", directory_.c_str(), "tmpfs", flags, options.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) umount2(directory_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string directory_;
  bool mounted_ = false;
  std::string error_;
};

// Gives the tmpfs mounted on `directory` a new size, e.g. "64m".
inline bool ResizeTmpfs(const std::string& directory, const std::string& size) {
  return mount("tmpfs", directory.c_str(), "tmpfs", MS_REMOUNT, ("size=" + size).c_str()) == 0;
}

// Bytes free on the file system that holds `directory`.
inline uint64_t FreeBytesAt(const std::string& directory) {
  struct statvfs disk {};
  if (statvfs(directory.c_str(), &disk) != 0) return 0;
  return static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
}

inline std::string FillerPath(const std::string& directory) { return directory + "/filler"; }

// Fills the file system that holds `directory` until at most `leave_bytes`
// are free, by growing the file FillerPath(directory); removing it frees the
// space again.
inline bool FillDisk(const std::string& directory, uint64_t leave_bytes) {
  const uint64_t free_bytes = FreeBytesAt(directory);
  if (free_bytes <= leave_bytes) return true;
  const int fd = open(FillerPath(directory).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const off_t end = lseek(fd, 0, SEEK_END);
  const int error = posix_fallocate(fd, end, static_cast<off_t>(free_bytes - leave_bytes));
  close(fd);
  return error == 0 && FreeBytesAt(directory) <= leave_bytes;
}

}  // namespace tally::testing
