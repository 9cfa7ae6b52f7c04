// TempDir: a fresh directory under /tmp for one test, removed with everything
// in it at the end of the scope (data directories, port files, mounts' roots).
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

namespace tally::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/tally-test-XXXXXX";
    REQUIRE_MESSAGE(mkdtemp(pattern.data()) != nullptr, "mkdtemp: " << std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // A path inside the directory.
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace tally::testing
