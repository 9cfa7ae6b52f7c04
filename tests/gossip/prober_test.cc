// Unit tests of SWIM's probing (node/gossip/prober.h) on explicit times,
// with messages passed by hand: the round-robin, indirect probes, the ack
// path through a helper, failures, and Lifeguard's local health.
#include "node/gossip/prober.h"

#include <algorithm>
#include <set>
#include <vector>

#include <doctest/doctest.h>

namespace tally {
namespace {

using Message = Prober::Message;

Prober::Options OptionsFor(NodeId self) {
  Prober::Options options;
  options.self = self;
  options.interval_ms = 500;
  options.timeout_ms = 1'000;
  options.indirect_probes = 2;
  options.seed = self;
  return options;
}

// Linked: the members of `linked`.
Prober::Linked Among(std::vector<NodeId> linked) {
  return [linked = std::move(linked)](NodeId id) {
    return std::find(linked.begin(), linked.end(), id) != linked.end();
  };
}

// Each interval one ping; a round of the order pings every member once.
TEST_CASE("prober: one ping per interval, every member once per round") {
  Prober prober(OptionsFor(1));
  const std::vector<NodeId> members = {2, 3, 4, 5};
  std::vector<Message> out;
  std::vector<NodeId> failed;
  std::multiset<NodeId> pinged;
  for (int64_t now_ms = 0; now_ms < 2'000; now_ms += 50) {
    out.clear();
    prober.Tick(now_ms, members, Among(members), &out, &failed);
    for (const Message& message : out) {
      CHECK_FALSE(message.probe.ack);
      CHECK(message.to == message.probe.target);
      pinged.insert(message.to);
      // Answered at once, so no probe stays under way.
      std::vector<Message> none;
      CHECK(prober.Receive(message.to, {message.probe.seq, 1, message.to, true, 0}, &none) ==
            message.to);
    }
  }
  CHECK(pinged == std::multiset<NodeId>{2, 3, 4, 5});
  CHECK(failed.empty());
  CHECK(prober.health() == 0);
}

// Helpers are asked only among linked members, and the ping goes again
// with them: the first may not have gone.
TEST_CASE("prober: an unanswered ping goes again, with helpers among linked members") {
  Prober prober(OptionsFor(1));
  const std::vector<NodeId> members = {2, 3, 4};
  std::vector<Message> out;
  std::vector<NodeId> failed;
  prober.ProbeNow(2, 0, &out);
  out.clear();
  prober.Tick(500, members, Among({2, 3}), &out, &failed);
  std::multiset<NodeId> to;
  for (const Message& message : out) {
    if (message.probe.target == 2) to.insert(message.to);
  }
  CHECK(to == std::multiset<NodeId>{2, 3});
}

// A link that comes up sends the ping of a probe under way again, at once.
TEST_CASE("prober: a link that comes up sends the pending ping again") {
  Prober prober(OptionsFor(1));
  std::vector<Message> out;
  prober.ProbeNow(2, 0, &out);
  prober.LinkUp(3, &out);
  CHECK(out.size() == 1);
  prober.LinkUp(2, &out);
  REQUIRE(out.size() == 2);
  CHECK(out[1].to == 2);
  CHECK(out[1].probe.seq == out[0].probe.seq);
}

// A member answers a ping to itself with an ack to whoever sent it.
TEST_CASE("prober: a ping is answered, to its sender") {
  Prober prober(OptionsFor(2));
  std::vector<Message> out;
  CHECK_FALSE(prober.Receive(7, {9, 1, 2, false, 0}, &out).has_value());
  REQUIRE(out.size() == 1);
  CHECK(out[0].to == 7);
  CHECK(out[0].probe.ack);
  CHECK(out[0].probe.seq == 9);
  CHECK(out[0].probe.origin == 1);
  CHECK(out[0].probe.target == 2);
}

// An unanswered ping goes to helpers at half the timeout; a helper pings
// the target for the origin and forwards its ack; the origin takes it.
TEST_CASE("prober: an indirect probe through a helper saves the member") {
  Prober origin(OptionsFor(1)), helper(OptionsFor(3)), target(OptionsFor(2));
  const std::vector<NodeId> members = {2, 3};
  std::vector<Message> out;
  std::vector<NodeId> failed;
  origin.ProbeNow(2, 0, &out);
  REQUIRE(out.size() == 1);
  const uint64_t seq = out[0].probe.seq;
  out.clear();
  origin.Tick(499, members, Among(members), &out, &failed);
  CHECK(std::none_of(out.begin(), out.end(), [](const Message& m) { return m.probe.target == 2; }));
  origin.Tick(500, members, Among(members), &out, &failed);  // half the timeout: ask 3
  const auto ask = std::find_if(out.begin(), out.end(),
                                [](const Message& m) { return m.to == 3 && m.probe.target == 2; });
  REQUIRE(ask != out.end());
  std::vector<Message> forwarded;
  helper.Receive(1, ask->probe, &forwarded);
  REQUIRE(forwarded.size() == 1);
  CHECK(forwarded[0].to == 2);
  std::vector<Message> ack;
  target.Receive(3, forwarded[0].probe, &ack);
  REQUIRE(ack.size() == 1);
  CHECK(ack[0].to == 3);
  std::vector<Message> back;
  helper.Receive(2, ack[0].probe, &back);
  REQUIRE(back.size() == 1);
  CHECK(back[0].to == 1);
  std::vector<Message> none;
  CHECK(origin.Receive(3, back[0].probe, &none) == NodeId{2});
  CHECK(back[0].probe.seq == seq);
  origin.Tick(1'000, members, Among(members), &out, &failed);
  CHECK(failed.empty());
}

// Node 1 probing its one peer, node 2, which never answers unless told to.
struct OnePeer {
  // Runs a tick at now_ms; out and failed get this tick's only.
  void Tick(int64_t now_ms) {
    out.clear();
    failed.clear();
    prober.Tick(now_ms, members, Among(members), &out, &failed);
  }
  Prober prober{OptionsFor(1)};
  const std::vector<NodeId> members = {2};
  std::vector<Message> out;
  std::vector<NodeId> failed;
};

// No ack at all within the timeout: the member fails, and local health
// worsens, so the next probe waits twice as long; an ack mends it.
TEST_CASE("prober: an unanswered probe fails, and the prober waits longer after") {
  OnePeer node;
  node.Tick(0);
  node.Tick(999);
  CHECK(node.failed.empty());
  node.Tick(1'000);
  CHECK(node.failed == std::vector<NodeId>{2});
  CHECK(node.prober.health() == 1);
  REQUIRE(node.out.size() == 1);  // the next ping, with a timeout of 2 x 1,000
  node.Tick(2'999);
  CHECK(node.failed.empty());
  node.Tick(3'000);
  CHECK(node.failed == std::vector<NodeId>{2});
  CHECK(node.prober.health() == 2);
  REQUIRE(node.out.size() == 1);
  std::vector<Message> none;
  node.prober.Receive(2, {node.out[0].probe.seq, 1, 2, true, 0}, &none);
  CHECK(node.prober.health() == 1);
}

// A stall moves the probes under way on by its length: the prober does not
// fail a member for the time it stood still itself.
TEST_CASE("prober: a stall does not fail the probes under way") {
  OnePeer node;
  node.Tick(0);
  node.prober.Stalled(2'000);
  node.Tick(2'500);
  CHECK(node.failed.empty());
  CHECK(node.prober.health() == 1);
}

// A member whose link dropped is probed at once, out of turn, and once.
TEST_CASE("prober: ProbeNow pings at once, unless a probe is under way") {
  Prober prober(OptionsFor(1));
  std::vector<Message> out;
  prober.ProbeNow(5, 10, &out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].to == 5);
  prober.ProbeNow(5, 20, &out);
  CHECK(out.size() == 1);
  CHECK(prober.busy());
}

// Probes are forwarded only one hop: a ping-req only from its origin, an
// ack only from its target; anything else is dropped, so no loops.
TEST_CASE("prober: forwarding is one hop only") {
  Prober helper(OptionsFor(3));
  std::vector<Message> out;
  helper.Receive(4, {1, 1, 2, false, 0}, &out);  // a ping for 2 from 1, sent by 4
  helper.Receive(4, {1, 1, 2, true, 0}, &out);   // an ack from 2 for 1, sent by 4
  CHECK(out.empty());
  std::vector<Message> none;
  CHECK_FALSE(helper.Receive(2, {42, 3, 2, true, 0}, &none).has_value());  // not one of its own
}

}  // namespace
}  // namespace tally
