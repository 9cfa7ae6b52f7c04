// The version every binary reports with --version (CMake's PROJECT_VERSION).
#pragma once

#include <string>
#include <string_view>

namespace tally {

// "0.9.0"
std::string_view Version();
// "<program> <version>", what --version prints.
std::string VersionLine(std::string_view program);

}  // namespace tally
