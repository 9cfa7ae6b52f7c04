#include "node/bin/tallyd_options.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "node/bin/cli_checks.h"
#include "node/common/status.h"
#include "protocol/peer_auth.h"

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
