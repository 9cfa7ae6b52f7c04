// MustCheck: one check through a client, failing the test on any error.
#pragma once

#include <doctest/doctest.h>

#include "node/common/limit.h"
#include "protocol/client.h"

namespace tally::testing {

inline Decision MustCheck(protocol::Client& client, const protocol::Check& check) {
  protocol::CheckOutcome outcome;
  const Status status = client.Check(check, &outcome);
  REQUIRE_MESSAGE(status.ok(), status.ToString());
  REQUIRE_MESSAGE(outcome.error == protocol::ErrorCode::kOk, outcome.error_message);
  return outcome.decision;
}

}  // namespace tally::testing
