#include "node/grpc/rls_metadata.h"

#include <string>

namespace tally {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using google::protobuf::Struct;
using google::protobuf::Value;

Value& Field(Struct* object, const std::string& name) { return (*object->mutable_fields())[name]; }

// A descriptor as envoyproxy/ratelimit describes it in the metadata.
void DescribeDescriptor(const envoy::extensions::common::ratelimit::v3::RateLimitDescriptor& in,
                        Struct* out) {
  auto* entries = Field(out, "entries").mutable_list_value();
  for (const auto& entry : in.entries()) {
    entries->add_values()->set_string_value(entry.key() + "=" + entry.value());
  }
  if (in.has_limit()) {
    Field(out, "limit")
        .set_string_value("requests_per_unit:" + std::to_string(in.limit().requests_per_unit()) +
                          " unit:" + envoy::type::v3::RateLimitUnit_Name(in.limit().unit()));
  }
  if (in.has_hits_addend()) {
    Field(out, "hitsAddend").set_number_value(static_cast<double>(in.hits_addend().value()));
  }
}

}  // namespace

void MetadataToValue(const Metadata& value, Value* out) {
  switch (value.kind) {
    case Metadata::Kind::kNull: out->set_null_value(google::protobuf::NULL_VALUE); return;
    case Metadata::Kind::kBool: out->set_bool_value(value.boolean); return;
    case Metadata::Kind::kNumber: out->set_number_value(value.number); return;
    case Metadata::Kind::kString: out->set_string_value(value.text); return;
    case Metadata::Kind::kList: {
      auto* list = out->mutable_list_value();
      for (const Metadata& item : value.items) MetadataToValue(item, list->add_values());
      return;
    }
    case Metadata::Kind::kMap: {
      auto* fields = out->mutable_struct_value()->mutable_fields();
      for (const auto& [name, field] : value.fields) MetadataToValue(field, &(*fields)[name]);
      return;
    }
  }
}

void FillDynamicMetadata(const rls::RateLimitRequest& request,
                         std::span<const DescriptorOutcome> outcomes, Struct* metadata) {
  metadata->Clear();
  Field(metadata, "domain").set_string_value(request.domain());
  auto* descriptors = Field(metadata, "descriptors").mutable_list_value();
  for (const auto& descriptor : request.descriptors()) {
    DescribeDescriptor(descriptor, descriptors->add_values()->mutable_struct_value());
  }
  if (request.hits_addend() != 0) {
    Field(metadata, "hitsAddend").set_number_value(static_cast<double>(request.hits_addend()));
  }
  Metadata merged;
  merged.kind = Metadata::Kind::kMap;
  for (const DescriptorOutcome& outcome : outcomes) {
    if (outcome.kind != DescriptorOutcome::Kind::kLimited || outcome.over_limit() ||
        outcome.rule->metadata == nullptr) {
      continue;
    }
    MergeMetadata(*outcome.rule->metadata, &merged);
  }
  if (!merged.fields.empty()) MetadataToValue(merged, &Field(metadata, "metadata"));
}

}  // namespace tally
