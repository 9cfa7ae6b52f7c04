#include "node/bin/cli_checks.h"

#include <string>

#include "node/common/host_port.h"

namespace tally::bin {

CLI::Validator InRange(int64_t min, int64_t max) {
  const std::string range = std::to_string(min) + ".." + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string& input) {
        int64_t value = 0;
        // The conversion CLI11 applies afterwards, so both read the same number.
        if (!CLI::detail::lexical_cast(input, value)) return input + " is not a whole number";
        if (value < min || value > max) return input + " is not in " + range;
        return std::string();
      },
      range);
}

CLI::Validator HostPortCheck() {
  return CLI::Validator(
      [](std::string& input) {
        HostPort parsed;
        return std::string(ParseHostPort(input, &parsed).message());  // empty when OK
      },
      "HOST:PORT");
}

}  // namespace tally::bin
