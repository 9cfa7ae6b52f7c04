// PolicyStore: loading a directory, reloads that take effect whole or not at
// all, and counters that survive a reload.
#include "node/policy/policy_store.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "node/policy/policy_checker.h"
#include "tests/support/temp_dir.h"

namespace tally {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

const std::string kApi =
    "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: "
    "3}\n";

// Several files are several domains; files that are not YAML by name are ignored.
TEST_CASE("policy store: loads every .yaml and .yml file of the directory") {
  testing::TempDir dir;
  Write(dir.Path("a.yaml"), kApi);
  Write(dir.Path("b.yml"), "domain: web\n");
  Write(dir.Path("notes.txt"), "not a policy");
  std::unique_ptr<PolicyStore> store;
  REQUIRE(PolicyStore::Open({.dir = dir.Path("")}, &store).ok());
  CHECK(store->Current()->HasDomain("api"));
  CHECK(store->Current()->HasDomain("web"));
  CHECK(store->stats().domains == 2);
  CHECK(store->stats().rules == 1);
}

// A node must not start on a directory that does not load.
TEST_CASE("policy store: a missing directory or a bad file refuses the start") {
  testing::TempDir dir;
  std::unique_ptr<PolicyStore> store;
  CHECK(PolicyStore::Open({.dir = dir.Path("missing")}, &store).code() == Status::Code::kIOError);
  Write(dir.Path("bad.yaml"), "domain: d\nbogus: 1\n");
  const Status status = PolicyStore::Open({.dir = dir.Path("")}, &store);
  CHECK(status.message().find("bad.yaml:2: unknown key 'bogus'") != std::string_view::npos);
  CHECK(store == nullptr);
}

// A bad file is refused and the previous set stays in force; a good one replaces it, counts kept.
TEST_CASE("policy store: a reload is all or nothing, and counters survive it") {
  testing::TempDir dir;
  Write(dir.Path("api.yaml"), kApi);
  std::unique_ptr<PolicyStore> store;
  REQUIRE(PolicyStore::Open({.dir = dir.Path("")}, &store).ok());
  ManualClock clock(1'700'000'000'000);
  Limiter limiter(Limiter::Options{.clock = &clock});
  PolicyCheckScratch scratch;
  std::vector<DescriptorOutcome> outcomes;
  const std::vector<DescriptorEntry> user = {{"user", "u1"}};
  const std::vector<DescriptorView> request = {user};
  const auto check = [&] {
    const std::shared_ptr<const PolicySet> policies = store->Current();
    CheckDescriptors(&limiter, *policies, "api", request, 1, &scratch, &outcomes);
    return outcomes[0];
  };
  CHECK(check().decision.remaining == 2);

  Write(dir.Path("api.yaml"), kApi + "  - key: broken\n    rate_limit: {unit: fortnight}\n");
  Write(dir.Path("new.yaml"), "domain: added\n");
  CHECK_FALSE(store->Reload().ok());
  CHECK_FALSE(store->Current()->HasDomain("added"));  // nothing of the refused set is in force
  CHECK(store->stats().reload_failures == 1);
  CHECK(check().decision.remaining == 1);

  // The limit goes from 3 to 5 in the same window: the 2 admitted so far still count.
  Write(dir.Path("api.yaml"),
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, "
        "requests_per_unit: 5}\n");
  REQUIRE(store->Reload().ok());
  CHECK(store->Current()->HasDomain("added"));
  CHECK(store->stats().reloads == 2);
  const DescriptorOutcome after = check();
  CHECK(after.decision.limit == 5);
  CHECK(after.decision.remaining == 2);
}

// The watcher thread picks up a change on disk by itself.
TEST_CASE("policy store: a change on disk is picked up without a call") {
  testing::TempDir dir;
  Write(dir.Path("api.yaml"), kApi);
  std::unique_ptr<PolicyStore> store;
  REQUIRE(PolicyStore::Open({.dir = dir.Path(""), .poll_interval_ms = 10}, &store).ok());
  store->Start();
  Write(dir.Path("web.yaml"), "domain: web\n");
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {  // bounded: at most 5 s
    seen = store->Current()->HasDomain("web");
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(seen);
  store->Stop();
}

}  // namespace
}  // namespace tally
