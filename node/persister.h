// Persister: moves the engine's changes to the Store, off the request path.
//
// A background thread wakes every flush_interval_ms, collects the keys that
// changed (Limiter::CollectChanges) and writes them in one batch. A failed
// write (disk full, I/O error) is logged and kept: the next flush writes it
// again with whatever changed since, and the node keeps serving from memory
// meanwhile (degraded: a crash then loses everything not yet written). A
// second thread compacts the store every compaction_interval_ms, which drops
// expired records without delaying a flush.
//
// What a crash loses: the changes of at most one flush interval (plus the
// flush in progress) on this node. Stop() flushes once more, so a clean
// shutdown loses nothing.
//
// Thread safety: Start and Stop from one thread; Flush and stats() from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "node/clock.h"
#include "node/limiter.h"
#include "storage/store.h"

namespace tally {

class Persister {
 public:
  struct Options {
    int64_t flush_interval_ms = 1'000;
    int64_t compaction_interval_ms = 600'000;  // 0: never
  };
  struct Stats {
    uint64_t flushes = 0;       // batches written
    uint64_t keys_written = 0;  // records in those batches
    uint64_t write_errors = 0;  // failed batches
    uint64_t pending_keys = 0;  // changes waiting for a write that failed
  };

  // limiter, store and clock must outlive the Persister.
  Persister(const Options& options, Limiter* limiter, storage::Store* store, const Clock* clock);
  ~Persister();  // Stop()

  void Start();
  // Stops the thread, then flushes once more. Returns that flush's status.
  Status Stop();
  // Collects and writes the changes now (the thread calls this).
  Status Flush();

  Stats stats() const;

 private:
  // Runs work every interval_ms on the calling thread until Stop.
  void Every(int64_t interval_ms, const std::function<void()>& work);

  const Options options_;
  Limiter* const limiter_;
  storage::Store* const store_;
  const Clock* const clock_;

  std::mutex mu_;  // guards stop_; the threads wait on wake_ with it
  std::condition_variable wake_;
  bool stop_ = false;
  std::mutex flush_mu_;  // one Flush at a time; guards pending_
  // Snapshots of a failed write, by (algorithm, window_ms, key): retried.
  std::map<std::tuple<Algorithm, uint64_t, std::string>, KeySnapshot> pending_;
  mutable std::mutex stats_mu_;  // guards stats_; never held across I/O
  Stats stats_;
  std::thread flush_thread_;
  std::thread compaction_thread_;
};

}  // namespace tally
