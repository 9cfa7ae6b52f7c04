// Disk space for Store: what is free, and a reserve file that holds space
// back for the writes at shutdown.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "node/common/status.h"

namespace tally::storage {

// Bytes an unprivileged writer may still use on the file system that holds
// `path` (statvfs f_bavail); nullopt when the file system does not say.
std::optional<uint64_t> FreeBytes(const std::string& path);

// Makes `file` hold `bytes` (more than 0) of allocated disk space, not a
// sparse file, creating, completing or shrinking it. IOError, with the file
// removed, when the disk has no room for it.
Status MakeReserve(const std::string& file, uint64_t bytes);

// Deletes `file`, which frees its space. False when there was no such file.
bool ReleaseReserve(const std::string& file);

}  // namespace tally::storage
