// JsonString: text as a quoted JSON string, for the tools' --json output.
// Keys are caller-chosen bytes, so quotes, backslashes and control characters
// are escaped. Bytes >= 0x80 pass through (valid UTF-8 stays valid).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace tally {

inline std::string JsonString(std::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

}  // namespace tally
