// Disk space for Store: what is free.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tally::storage {

// Bytes an unprivileged writer may still use on the file system that holds
// `path` (statvfs f_bavail); nullopt when the file system does not say.
std::optional<uint64_t> FreeBytes(const std::string& path);

}  // namespace tally::storage
