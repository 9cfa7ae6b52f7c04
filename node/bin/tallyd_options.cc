#include "node/bin/tallyd_options.h"

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "node/bin/cli_checks.h"
#include "node/common/status.h"
#include "node/common/version.h"
#include "protocol/peer_auth.h"
#include "protocol/peer_codec.h"
#include "storage/store.h"

namespace tally::bin {
namespace {

// A config file is a few dozen lines; anything this large is the wrong file.
constexpr size_t kMaxConfigBytes = 1 << 20;
// A secret is tens of bytes (32 random bytes in base64 are 44).
constexpr size_t kMaxSecretBytes = 4096;

// Reads what `in` holds into *text, refusing more than max_bytes (a device
// such as /dev/zero never ends) and reporting a failed read (a directory).
Status ReadAtMost(std::istream& in, size_t max_bytes, std::string* text) {
  text->resize(max_bytes + 1);
  in.read(text->data(), static_cast<std::streamsize>(text->size()));
  if (in.bad()) return Status::IOError(std::strerror(errno));
  text->resize(static_cast<size_t>(in.gcount()));
  if (text->size() > max_bytes) {
    return Status::InvalidArgument("holds more than " + std::to_string(max_bytes) + " bytes");
  }
  return Status::OK();
}

// CLI11's TOML reader, refusing what CLI11 would pass over in silence: a key
// that names no flag (a misspelt one, or a line that is not `key = value`),
// a key inside a [section], a key set twice, and files over kMaxConfigBytes.
class StrictConfig : public CLI::ConfigTOML {
 public:
  explicit StrictConfig(const CLI::App* app) : app_(app) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::string text;
    if (Status status = ReadAtMost(input, kMaxConfigBytes, &text); !status.ok()) {
      throw CLI::ConfigError(std::string(status.message()));
    }
    std::istringstream whole(text);
    std::vector<CLI::ConfigItem> read = CLI::ConfigTOML::from_config(whole);
    std::set<std::string> seen;
    std::vector<CLI::ConfigItem> kept;  // what no environment variable overrides
    for (CLI::ConfigItem& item : read) {
      if (item.name == "++" || item.name == "--") continue;  // CLI11's marks around a [section]
      const std::string key = item.fullname();
      const CLI::Option* option =
          item.parents.empty() ? app_->get_option_no_throw("--" + key) : nullptr;
      if (option == nullptr || !option->get_configurable()) {
        throw Refusal(text, key, 0, "unknown key '" + key + "'");
      }
      if (!seen.insert(key).second) throw Refusal(text, key, 1, "'" + key + "' is set twice");
      if (EnvironmentValue(*option) == nullptr) kept.push_back(std::move(item));
    }
    return kept;
  }

 private:
  // The error `why`, located at the line of `text` where `key` occurs for the
  // occurrence-th time (from 0) when CLI11 reads that line alone; unlocated
  // when it does not (a key in a [section]).
  CLI::ConfigError Refusal(const std::string& text, const std::string& key, int occurrence,
                           const std::string& why) const {
    std::istringstream lines(text);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      std::istringstream alone(line);
      for (const CLI::ConfigItem& item : CLI::ConfigTOML::from_config(alone)) {
        if (item.fullname() == key && occurrence-- == 0) {
          return CLI::ConfigError("line " + std::to_string(number) + ": " + why);
        }
      }
    }
    return CLI::ConfigError(why);
  }

  const CLI::App* app_;
};

// A port tallyd listens on, as its options set it.
struct ListenPort {
  std::string flag;  // "--gossip-port"
  int64_t port = 0;  // 0: one picked at start, which clashes with none
  std::string address;
};

// An address as an IP literal (what the acceptors take, node/net/acceptor.h;
// gRPC's in brackets too): its family, AF_UNSPEC when it is a name, and bytes.
struct Ip {
  int family = AF_UNSPEC;
  std::array<unsigned char, 16> bytes{};

  bool wildcard() const {  // 0.0.0.0 or ::
    return family != AF_UNSPEC && bytes == std::array<unsigned char, 16>{};
  }
};

Ip ParseIp(std::string address) {
  if (address.size() >= 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  Ip ip;
  if (inet_pton(AF_INET, address.c_str(), ip.bytes.data()) == 1) {
    ip.family = AF_INET;
  } else if (inet_pton(AF_INET6, address.c_str(), ip.bytes.data()) == 1) {
    ip.family = AF_INET6;
  }
  return ip;
}

// Whether two sockets on these addresses cannot listen on one port: the same
// address, or a wildcard beside an address of its family, :: beside any IPv4
// one too (dual stack, Linux's default). A name clashes with the same name
// only: what it resolves to is not known yet.
bool AddressesClash(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const Ip x = ParseIp(a), y = ParseIp(b);
  if (x.family == AF_UNSPEC || y.family == AF_UNSPEC) return false;
  if (x.family == y.family) return x.bytes == y.bytes || x.wildcard() || y.wildcard();
  return (x.family == AF_INET6 && x.wildcard()) || (y.family == AF_INET6 && y.wildcard());
}

// The value of the option named `flag` as text; empty when `app` has no such
// option, or it has no value nor default.
std::string Value(const CLI::App& app, const std::string& flag) {
  const CLI::Option* option = app.get_option_no_throw(flag);
  return option == nullptr ? std::string() : option->as<std::string>();
}

// Whether the option named `flag` was given (flag, variable or config file).
bool Given(const CLI::App& app, const std::string& flag) {
  const CLI::Option* option = app.get_option_no_throw(flag);
  return option != nullptr && option->count() > 0;
}

// The ports tallyd will listen on, as parsed into `app`: the client port
// (--port) always; the gossip port when the node is clustered (--seed or
// --cluster-secret-file; unset, its default does not count otherwise) or it
// is set; a front's port when it is set. Each on its own --*-address, or else
// --address.
std::vector<ListenPort> ListenPorts(const CLI::App& app) {
  std::vector<ListenPort> ports;
  const CLI::Option* client = app.get_option_no_throw("--port");
  if (client == nullptr) return ports;  // not tallyd's options
  const std::string address = Value(app, "--address");
  ports.push_back({"--port", client->as<int64_t>(), address});
  const bool clustered = Given(app, "--seed") || !Value(app, "--cluster-secret-file").empty();
  for (const std::string name : {"gossip", "grpc", "http", "admin", "resp"}) {
    const std::string flag = "--" + name + "-port";
    if (!Given(app, flag) && !(name == "gossip" && clustered)) continue;
    const std::string own_address = Value(app, "--" + name + "-address");
    ports.push_back(
        {flag, app.get_option(flag)->as<int64_t>(), own_address.empty() ? address : own_address});
  }
  return ports;
}

// InvalidArgument, naming both flags, when two of `ports` are the same
// nonzero number on addresses that clash.
Status CheckPortsDistinct(const std::vector<ListenPort>& ports) {
  for (size_t i = 0; i < ports.size(); ++i) {
    for (size_t j = i + 1; j < ports.size(); ++j) {
      const ListenPort& a = ports[i];
      const ListenPort& b = ports[j];
      if (a.port == 0 || a.port != b.port || !AddressesClash(a.address, b.address)) continue;
      return Status::InvalidArgument(
          a.flag + " and " + b.flag + " are both " + std::to_string(a.port) + " on " + a.address +
          (a.address == b.address ? "" : " and " + b.address) +
          ": each port tallyd listens on needs a number of its own (0 picks a free one)");
    }
  }
  return Status::OK();
}

}  // namespace

void AddConfigOption(CLI::App* app) {
  app->set_config("--config", "",
                  "Read options from a TOML file (flags and TALLY_* variables override it)");
  app->config_formatter(std::make_shared<StrictConfig>(app));
}

std::optional<int> ParseOrExit(CLI::App& app, int argc, char** argv) {
  AddEnvironmentNames(&app, "TALLY_");
  CLI::Option* config = app.get_config_ptr();
  if (const char* file = EnvironmentValue(*config)) config->default_str(file)->required();
  // Where the config file was named, and where a refused value came from.
  std::string config_source = EnvironmentSource(*config, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    if (config_source.empty()) config_source = "--config " + config->as<std::string>();
    if (dynamic_cast<const CLI::FileError*>(&e) != nullptr) {  // CLI11's check before it reads
      spdlog::error("not starting: {}: no such file, or not a file", config_source);
    } else if (dynamic_cast<const CLI::ConfigError*>(&e) != nullptr) {
      spdlog::error("not starting: {}: {}", config_source, e.what());
    } else if (const std::string source = EnvironmentSource(app, e, argc, argv); !source.empty()) {
      spdlog::error("not starting: {}: {}", source, e.what());
    } else {
      spdlog::error("not starting: {}", e.what());
    }
    return 1;
  }
  if (Status status = CheckPortsDistinct(ListenPorts(app)); !status.ok()) {
    spdlog::error("not starting: {}", status.message());
    return 1;
  }
  return std::nullopt;
}

Status ReadSecretFile(const std::string& path, const std::string& what, size_t min_bytes,
                      std::string* secret) {
  const std::string file = what + " file " + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + file + ": " + std::strerror(errno));
  if (Status status = ReadAtMost(in, kMaxSecretBytes, secret); !status.ok()) {
    return status.code() == Status::Code::kIOError
               ? Status::IOError("cannot read " + file + ": " + std::string(status.message()))
               : Status::InvalidArgument(file + " " + std::string(status.message()));
  }
  while (!secret->empty() && std::isspace(static_cast<unsigned char>(secret->back()))) {
    secret->pop_back();
  }
  if (secret->size() < min_bytes) {
    return Status::InvalidArgument(what + " in " + path + " has " + std::to_string(secret->size()) +
                                   " bytes; it needs at least " + std::to_string(min_bytes));
  }
  std::error_code ec;
  const auto permissions = std::filesystem::status(path, ec).permissions();
  if (!ec &&
      (permissions & (std::filesystem::perms::group_read | std::filesystem::perms::others_read)) !=
          std::filesystem::perms::none) {
    spdlog::warn("{} is readable by others than its owner", file);
  }
  return Status::OK();
}

Status ReadClusterSecret(const std::string& path, std::string* secret) {
  return ReadSecretFile(path, "the cluster secret", protocol::kMinSecretBytes, secret);
}

std::string VersionText() {
  return VersionLine("tallyd") +
         "\npeer protocol: " + std::to_string(protocol::kPeerProtocolVersion) +
         "\ndata directory format: " + storage::kFormatMarker;
}

bool WritePortFile(const std::string& path, uint16_t port) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << port << "\n";
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  return !ec;
}

}  // namespace tally::bin
