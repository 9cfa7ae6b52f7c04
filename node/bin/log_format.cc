#include "node/bin/log_format.h"

#include <chrono>
#include <ctime>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

namespace tally::bin {
namespace {

// "2026-12-04T16:52:52.123Z"
std::string Rfc3339Utc(std::chrono::system_clock::time_point time) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch());
  const std::time_t seconds = static_cast<std::time_t>(ms.count() / 1'000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  const size_t length = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  return std::string(text, length) + "." + std::to_string(1'000 + ms.count() % 1'000).substr(1) +
         "Z";
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& message, spdlog::memory_buf_t& dest) override {
    const nlohmann::ordered_json line = {
        {"time", Rfc3339Utc(message.time)},
        {"level", std::string(spdlog::level::to_string_view(message.level).data(),
                              spdlog::level::to_string_view(message.level).size())},
        {"logger", std::string(message.logger_name.data(), message.logger_name.size())},
        {"message", std::string(message.payload.data(), message.payload.size())}};
    const std::string text =
        line.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

void UseJsonLogs() { spdlog::default_logger()->set_formatter(std::make_unique<JsonFormatter>()); }

void AddLogFormatOption(CLI::App* app) {
  app->add_option_function<std::string>(
         "--log-format",
         [](const std::string& format) {
           if (format == "json") UseJsonLogs();
         },
         "text (for people) or json (one object per line, for log shippers)")
      ->check(CLI::IsMember({"text", "json"}))
      ->default_str("text");
}

}  // namespace tally::bin
