// RoundClock: when the next gossip round is due, every interval, sooner
// when asked, later at rest until work comes.
#include "node/gossip/round_clock.h"

#include <doctest/doctest.h>

namespace tally {
namespace {

// A round that did something: the next comes one interval after it began.
TEST_CASE("round clock: a busy round is followed an interval later") {
  RoundClock clock(50, 1'000);
  CHECK(clock.next_round_at_ms() == 1'050);
  clock.Begin(1'052);
  clock.End(/*busy=*/true, {10'000});
  CHECK(clock.next_round_at_ms() == 1'102);
  CHECK_FALSE(clock.resting());
}

// A round that found nothing rests until the soonest of what it waits for,
// but never for less than an interval.
TEST_CASE("round clock: an idle round rests until the soonest wait") {
  RoundClock clock(50, 0);
  clock.Begin(50);
  clock.End(/*busy=*/false, {400, 2'000});
  CHECK(clock.resting());
  CHECK(clock.next_round_at_ms() == 450);
  clock.Begin(450);
  clock.End(/*busy=*/false, {30});
  CHECK_FALSE(clock.resting());
  CHECK(clock.next_round_at_ms() == 500);
}

// Work during a rest brings the next round back to an interval after the
// last, or to now if that has passed; without a rest, nothing moves.
TEST_CASE("round clock: work ends a rest") {
  RoundClock clock(50, 0);
  clock.Begin(100);
  clock.End(/*busy=*/false, {1'000});
  CHECK(clock.EndRest(120));
  CHECK(clock.next_round_at_ms() == 150);
  CHECK_FALSE(clock.resting());
  CHECK_FALSE(clock.EndRest(130));
  clock.Begin(150);
  clock.End(/*busy=*/false, {1'000});
  CHECK(clock.EndRest(400));
  CHECK(clock.next_round_at_ms() == 400);
}

// An early round comes a tenth of an interval after the last at the soonest.
TEST_CASE("round clock: an early round waits a tenth of an interval") {
  RoundClock clock(50, 0);
  clock.Begin(100);
  clock.End(/*busy=*/true, {});
  CHECK(clock.BringForward(101));
  CHECK(clock.next_round_at_ms() == 105);
  CHECK_FALSE(clock.BringForward(102));
  CHECK_FALSE(clock.BringForward(104));
  clock.Begin(105);
  clock.End(/*busy=*/true, {});
  CHECK(clock.BringForward(130));
  CHECK(clock.next_round_at_ms() == 130);
}

}  // namespace
}  // namespace tally
