#include "node/http/query_string.h"

namespace tally {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `encoded` into *out.
Status Decode(std::string_view encoded, std::string* out) {
  out->clear();
  for (size_t i = 0; i < encoded.size(); ++i) {
    const char c = encoded[i];
    if (c == '+') {
      out->push_back(' ');
    } else if (c != '%') {
      out->push_back(c);
    } else {
      const bool complete = i + 2 < encoded.size();
      const int high = complete ? HexValue(encoded[i + 1]) : -1;
      const int low = complete ? HexValue(encoded[i + 2]) : -1;
      if (high < 0 || low < 0) {
        return Status::InvalidArgument("bad percent-encoding in the query: " +
                                       std::string(encoded));
      }
      out->push_back(static_cast<char>(high * 16 + low));
      i += 2;
    }
  }
  return Status::OK();
}

}  // namespace

Status ParseQuery(std::string_view query, QueryParams* params) {
  size_t count = 0;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    if (params->size() <= count) params->emplace_back();
    auto& [name, value] = (*params)[count++];
    const size_t equals = pair.find('=');
    if (Status status = Decode(pair.substr(0, equals), &name); !status.ok()) return status;
    const std::string_view encoded_value =
        equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1);
    if (Status status = Decode(encoded_value, &value); !status.ok()) return status;
  }
  params->resize(count);
  return Status::OK();
}

}  // namespace tally
