#include "node/bin/cli_checks.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "node/common/host_port.h"

namespace tally::bin {
namespace {

// Whether `text` names the option `name` ("--port", not "--port-file").
bool Mentions(std::string_view text, std::string_view name) {
  for (size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1)) {
    const size_t end = at + name.size();
    if (end == text.size() || (!std::isalnum(static_cast<unsigned char>(text[end])) &&
                               text[end] != '-' && text[end] != '_')) {
      return true;
    }
  }
  return false;
}

// Whether argv gives `option` a value itself (--name value, or --name=value).
bool OnCommandLine(const CLI::Option& option, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    for (const std::string& name : option.get_lnames()) {
      const std::string flag = "--" + name;
      if (arg == flag || arg.rfind(flag + "=", 0) == 0) return true;
    }
  }
  return false;
}

}  // namespace

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

void AddEnvironmentNames(CLI::App* app, std::string_view prefix) {
  for (CLI::Option* option : app->get_options()) {
    if (option->get_lnames().empty() ||
        (!option->get_configurable() && option != app->get_config_ptr())) {
      continue;  // --help, --version
    }
    std::string name(prefix);
    for (const char c : option->get_lnames().front()) {
      name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    option->envname(name);
    if (option->get_items_expected_max() > 1) option->delimiter(',');
  }
}

const char* EnvironmentValue(const CLI::Option& option) {
  if (option.get_envname().empty()) return nullptr;
  const char* value = std::getenv(option.get_envname().c_str());
  return value != nullptr && *value != '\0' ? value : nullptr;
}

std::string EnvironmentSource(const CLI::Option& option, int argc, const char* const* argv) {
  const char* value = EnvironmentValue(option);
  if (value == nullptr || OnCommandLine(option, argc, argv)) return "";
  return option.get_envname() + "=" + value;
}

std::string EnvironmentSource(const CLI::App& app, const CLI::Error& error, int argc,
                              const char* const* argv) {
  for (const CLI::Option* option : app.get_options()) {
    if (!Mentions(error.what(), option->get_name())) continue;
    if (std::string source = EnvironmentSource(*option, argc, argv); !source.empty()) {
      return source;
    }
  }
  return "";
}

}  // namespace tally::bin
