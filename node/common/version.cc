#include "node/common/version.h"

namespace tally {

std::string_view Version() { return TALLY_VERSION; }

std::string VersionLine(std::string_view program) {
  return std::string(program) + " " + std::string(Version());
}

}  // namespace tally
