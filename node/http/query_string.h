// ParseQuery: the parameters of a URL's query string
// (application/x-www-form-urlencoded: `name=value` pairs joined by '&',
// percent-encoded, '+' for a space), in the order sent. A parameter without
// '=' has an empty value; empty pairs ("a=1&&b=2") are skipped.
//
// Thread safety: stateless.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "node/common/status.h"

namespace tally {

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// Fills *params (reusing its strings' memory); InvalidArgument for a '%' not
// followed by two hex digits.
Status ParseQuery(std::string_view query, QueryParams* params);

}  // namespace tally
