// Metadata: what a descriptor's `metadata` (envoyproxy/ratelimit's key) holds,
// any YAML mapping, as a tree of JSON's values. tally returns it with a
// decision: as Envoy dynamic metadata over gRPC (node/grpc/rls_handler.h),
// as JSON in the HTTP and RESP answers.
//
// Scalars keep the type YAML 1.1 gives them, as envoyproxy/ratelimit reads
// them: null, true/false, numbers (as doubles, as protobuf's Struct holds
// them), strings; a quoted scalar is always a string.
//
// Thread safety: a value; immutable once a PolicySet holds it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tally {

struct MetadataField;

struct Metadata {
  enum class Kind { kNull, kBool, kNumber, kString, kList, kMap };
  Kind kind = Kind::kNull;
  bool boolean = false;               // kBool
  double number = 0;                  // kNumber
  std::string text;                   // kString
  std::vector<Metadata> items;        // kList
  std::vector<MetadataField> fields;  // kMap: keys unique, in the file's order

  // The field named `name` of a map; nullptr when absent (or not a map).
  const Metadata* Find(const std::string& name) const;
};

// One field of a map: its name and value, read as a pair's. A struct of its
// own, not a std::pair: clang's checks of a pair of the still incomplete
// Metadata inside Metadata fail (the fuzz build compiles with clang).
struct MetadataField {
  MetadataField(std::string name, Metadata value)
      : first(std::move(name)), second(std::move(value)) {}
  std::string first;
  Metadata second;
};

// `value` as JSON text (whole numbers up to 2^53 without a fraction; strings
// escaped, invalid UTF-8 replaced by U+FFFD).
std::string MetadataJson(const Metadata& value);

// envoyproxy/ratelimit's merge of the metadata of a response's descriptors:
// every field of `from` (a map) that *into (a map) lacks is added; where both
// hold a map under one name they are merged the same way; any other field
// of *into stays as it is, so the first descriptor's value wins.
void MergeMetadata(const Metadata& from, Metadata* into);

}  // namespace tally
