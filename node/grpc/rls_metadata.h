// The dynamic metadata of a ShouldRateLimit answer (RlsHandler with
// Options::response_metadata), as envoyproxy/ratelimit writes it with
// RESPONSE_DYNAMIC_METADATA:
//   {"domain": d,
//    "descriptors": [{"entries": ["key=value", ...], "limit": "...",
//                     "hitsAddend": n}, ...],   limit, hitsAddend: when set
//    "hitsAddend": n,                           when the request set one
//    "metadata": {...}}                         when any policy gave some
// "metadata" merges (MergeMetadata) the policies' metadata of the request's
// descriptors that are not over their limits, in the request's order;
// unlimited descriptors and those without a limit give none.
//
// Thread safety: stateless.
#pragma once

#include <span>

#include <google/protobuf/struct.pb.h>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "node/policy/policy_checker.h"
#include "node/policy/policy_metadata.h"

namespace tally {

// `outcomes` has one entry per descriptor of `request`.
void FillDynamicMetadata(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                         std::span<const DescriptorOutcome> outcomes,
                         google::protobuf::Struct* metadata);

// `value` as a protobuf Value (numbers as doubles, as Struct holds them).
void MetadataToValue(const Metadata& value, google::protobuf::Value* out);

}  // namespace tally
