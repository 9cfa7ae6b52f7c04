// PolicyStore: the node's current PolicySet, read from a directory of policy
// files (--policy-dir) and replaced as a whole when the files change.
//
// Reload reads and validates every file first; only a set that loads
// completely replaces the current one. A file that does not parse or
// validate is refused with a log line naming the file, line and reason, and
// the node keeps serving with the previous set. Counters live in the engine
// under keys derived from domain and descriptor (CounterKey), so a reload
// does not touch them: a limit whose algorithm and window did not change
// keeps its counts, whatever else changed.
//
// Checks decided under any of its sets are counted by rule in one
// RuleCounters that outlives reloads (RuleSeries).
//
// Start runs a thread ("tally-policy") that looks at the directory every
// poll_interval_ms (file names, sizes and modification times) and reloads
// when anything changed; Reload may also be called directly (SIGHUP).
//
// Thread safety: Current, Reload and stats may be called from any thread.
// The watcher thread owns the directory fingerprint.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "node/common/clock.h"
#include "node/common/status.h"
#include "node/policy/policy.h"
#include "node/policy/rule_counters.h"

namespace tally {

class PolicyStore {
 public:
  struct Options {
    std::string dir;
    int64_t poll_interval_ms = 1'000;
    const Clock* clock = SystemClock::Default();  // not owned; times reloads
    bool merge_domains = false;                   // PolicyLoadOptions::merge_domains
    size_t max_rule_series = RuleCounters::kDefaultMaxSeries;
  };

  struct Stats {
    uint64_t reloads = 0;          // sets that replaced the previous one (the first load included)
    uint64_t reload_failures = 0;  // loads refused, the previous set kept
    uint64_t domains = 0;
    uint64_t rules = 0;
    int64_t last_reload_ms = 0;  // how long the last successful load took
  };

  // Loads the directory; an error (no such directory, a bad file) means the
  // node must not start.
  static Status Open(const Options& options, std::unique_ptr<PolicyStore>* store);
  ~PolicyStore();  // Stop()

  // The set to decide with; never null. Hold the pointer for one request.
  std::shared_ptr<const PolicySet> Current() const;

  // Reads the directory again. OK when the new set is in force (or nothing
  // changed); otherwise the error, logged, and the previous set stays.
  Status Reload();

  void Start();
  void Stop();

  Stats stats() const;
  // Checks by rule, over every set this store has loaded (RuleCounters::Read).
  std::vector<std::pair<std::string, FrontCounters::Outcomes>> RuleSeries() const;
  // The domain of each metrics slot (PolicySet::DomainSlot), by slot: every
  // domain any set loaded so far has held, in the order they first
  // appeared, up to FrontCounters::kOtherDomain; "" for the unnamed slots.
  std::vector<std::string> DomainSlotNames() const;

 private:
  explicit PolicyStore(const Options& options)
      : options_(options),
        rule_counters_(std::make_shared<RuleCounters>(options.max_rule_series)) {}
  Status Load(bool log_unchanged);
  // Gives each domain of `set` its slot, new domains the next free ones.
  // Called under mu_.
  void AssignDomainSlots(PolicySet* set);
  std::string Fingerprint() const;  // of the directory's listing

  const Options options_;
  const std::shared_ptr<RuleCounters> rule_counters_;  // given to every set
  mutable std::mutex mu_;                              // guards current_, stats_ and stop_
  std::shared_ptr<const PolicySet> current_;
  Stats stats_;
  std::vector<std::string> slot_names_;  // by slot; grows, never shrinks
  bool stop_ = false;
  std::mutex reload_mu_;  // one Load at a time
  std::condition_variable wake_;
  std::string watched_;  // the directory as last looked at; Open, then the watcher thread
  std::thread watcher_;
};

}  // namespace tally
