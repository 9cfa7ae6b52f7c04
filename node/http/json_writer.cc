#include "node/http/json_writer.h"

#include <charconv>

#include <nlohmann/json.hpp>

namespace tally {

void JsonWriter::Bool(std::string_view key, bool value) {
  Key(key);
  *out_ += value ? "true" : "false";
}

void JsonWriter::Number(std::string_view key, uint64_t value) {
  Key(key);
  char digits[24];
  out_->append(digits, std::to_chars(digits, digits + sizeof(digits), value).ptr);
}

void JsonWriter::String(std::string_view key, std::string_view value) {
  Key(key);
  Quoted(value);
}

void JsonWriter::Key(std::string_view key) {
  Separate();
  Quoted(key);
  out_->push_back(':');
}

void JsonWriter::Quoted(std::string_view text) {
  for (const char c : text) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
      *out_ += nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return;
    }
  }
  out_->push_back('"');
  *out_ += text;
  out_->push_back('"');
}

}  // namespace tally
