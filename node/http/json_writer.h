// JsonWriter: appends one JSON document to a string that keeps its memory
// between requests (a decision's body, written on every check). Strings of
// printable ASCII without '"' or '\' are copied as they are; any other goes
// through nlohmann-json's serializer (escapes, and invalid UTF-8 replaced by
// U+FFFD), so the output is always valid JSON.
//
// Thread safety: one writer per thread; it borrows the string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tally {

class JsonWriter {
 public:
  // Clears *out and writes into it; out must outlive the writer.
  explicit JsonWriter(std::string* out) : out_(out) { out_->clear(); }

  // An object: as the document, as an array element, or as `key`'s value.
  void BeginObject() {
    Separate();
    out_->push_back('{');
    first_ = true;
  }
  void BeginObject(std::string_view key) {
    Key(key);
    out_->push_back('{');
    first_ = true;
  }
  void EndObject() {
    out_->push_back('}');
    first_ = false;
  }
  void BeginArray(std::string_view key) {
    Key(key);
    out_->push_back('[');
    first_ = true;
  }
  void EndArray() {
    out_->push_back(']');
    first_ = false;
  }

  void Bool(std::string_view key, bool value);
  void Number(std::string_view key, uint64_t value);
  void String(std::string_view key, std::string_view value);
  // `json`, a JSON value written elsewhere (valid JSON), as `key`'s value.
  void Json(std::string_view key, std::string_view json) {
    Key(key);
    out_->append(json);
  }

 private:
  void Separate() {
    if (!first_) out_->push_back(',');
    first_ = false;
  }
  void Key(std::string_view key);
  void Quoted(std::string_view text);

  std::string* const out_;
  bool first_ = true;  // nothing written yet in the current object or array
};

}  // namespace tally
