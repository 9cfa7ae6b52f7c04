#include "node/policy/policy_metadata.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace tally {
namespace {

constexpr double kExactIntegers = 9007199254740992.0;  // 2^53

void AppendQuoted(const std::string& text, std::string* out) {
  out->append(nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void AppendNumber(double number, std::string* out) {
  char buffer[32];
  if (std::trunc(number) == number && std::fabs(number) <= kExactIntegers) {
    std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(number));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.17g", number);
  }
  out->append(buffer);
}

void AppendJson(const Metadata& value, std::string* out) {
  switch (value.kind) {
    case Metadata::Kind::kNull: out->append("null"); return;
    case Metadata::Kind::kBool: out->append(value.boolean ? "true" : "false"); return;
    case Metadata::Kind::kNumber: AppendNumber(value.number, out); return;
    case Metadata::Kind::kString: AppendQuoted(value.text, out); return;
    case Metadata::Kind::kList:
      out->push_back('[');
      for (size_t i = 0; i < value.items.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendJson(value.items[i], out);
      }
      out->push_back(']');
      return;
    case Metadata::Kind::kMap:
      out->push_back('{');
      for (size_t i = 0; i < value.fields.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendQuoted(value.fields[i].first, out);
        out->push_back(':');
        AppendJson(value.fields[i].second, out);
      }
      out->push_back('}');
      return;
  }
}

}  // namespace

const Metadata* Metadata::Find(const std::string& name) const {
  for (const auto& [field, value] : fields) {
    if (field == name) return &value;
  }
  return nullptr;
}

std::string MetadataJson(const Metadata& value) {
  std::string out;
  AppendJson(value, &out);
  return out;
}

void MergeMetadata(const Metadata& from, Metadata* into) {
  for (const auto& [name, value] : from.fields) {
    Metadata* held = nullptr;
    for (auto& [field, existing] : into->fields) {
      if (field == name) held = &existing;
    }
    if (held == nullptr) {
      into->fields.emplace_back(name, value);
    } else if (held->kind == Metadata::Kind::kMap && value.kind == Metadata::Kind::kMap) {
      MergeMetadata(value, held);
    }
  }
}

}  // namespace tally
