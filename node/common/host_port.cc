#include "node/common/host_port.h"

#include <charconv>
#include <limits>

namespace tally {

Status ParseHostPort(std::string_view text, HostPort* out) {
  const auto refused = [text](std::string_view why) {
    std::string message = "'";
    message.append(text).append("' is not host:port (").append(why).append(")");
    return Status::InvalidArgument(message);
  };
  std::string_view host;
  std::string_view rest;  // what follows the host: ":port" when well formed
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return refused("'[' without ']'");
    host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
  } else {
    const size_t colon = text.find(':');
    host = text.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon);
    if (rest.find(':', 1) != std::string_view::npos) {
      return refused("an IPv6 address needs brackets, as in [::1]:7421");
    }
  }
  if (host.empty()) return refused("no host");
  if (rest.size() < 2 || rest.front() != ':') return refused("no port");
  const std::string_view digits = rest.substr(1);
  uint64_t port = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (error == std::errc::invalid_argument || end != digits.data() + digits.size()) {
    return refused(std::string("port '").append(digits).append("' is not a number"));
  }
  if (error == std::errc::result_out_of_range || port == 0 ||
      port > std::numeric_limits<uint16_t>::max()) {
    return refused(std::string("port ").append(digits).append(" is not in 1..65535"));
  }
  out->host.assign(host);
  out->port = static_cast<uint16_t>(port);
  return Status::OK();
}

std::string FormatHostPort(std::string_view host, uint16_t port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  std::string text;
  if (v6) text += '[';
  text += host;
  if (v6) text += ']';
  text += ':';
  text += std::to_string(port);
  return text;
}

}  // namespace tally
