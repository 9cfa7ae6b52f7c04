// Persister: moves the engine's changes to the Store, off the request path.
//
// A background thread wakes every flush_interval_ms and writes the keys that
// changed (Limiter::CollectChanges) as one run, each snapshot encoded as it
// is collected. When the runs since the last checkpoint have grown as large
// as it (Store::CheckpointDue), that flush writes a checkpoint instead: every
// live key (Limiter::CollectAll), replacing all earlier runs, which is how
// expired state leaves the disk. A failed write (disk full, I/O error) is
// logged and counted, and the next flush writes a checkpoint, which covers
// whatever that write held; the node keeps serving from memory meanwhile
// (degraded: a crash then loses everything not yet written). While degraded
// it logs every failed flush (at most a line a second) and reports it in
// stats(); the first write that succeeds again is logged too. A second
// thread writes a checkpoint and compacts the store every
// compaction_interval_ms, so that even a node whose keys have gone quiet
// drops what has expired. A flush after Limiter::Erase writes a checkpoint
// too: runs only add or raise state, so only a checkpoint (which replaces
// them) takes an erased key off the disk.
//
// Peers' slots that a merge changed while this node's own did not are
// written at most every peer_flush_interval_ms (Limiter::CollectChanges with
// peer changes), not at every flush: on a key that several peers admit to,
// their merges arrive at different times, and writing each one again costs
// a cluster node more than its own admissions do. A restarted node gets
// those slots back from its peers' full syncs anyway (it waits for them);
// what it reads from disk matters only when no peer answers.
//
// What a crash loses: this node's changes of at most one flush interval
// (plus the flush in progress), and peers' slots merged in the last
// peer_flush_interval_ms, which the peers still hold. Stop() loses nothing: it writes what
// changed since the last write (the smallest write that covers it all),
// using the room the store keeps for it (Store::BeginLastWrites), then a
// checkpoint, so that the next start reads a single run, and marks the
// directory stopped (Store::MarkStopped: the next start knows it lost
// nothing). Only when a write failed after collecting its changes
// (Stats::unsaved) must the checkpoint itself succeed.
//
// Thread safety: Start and Stop from one thread; Flush, Checkpoint and
// stats() from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "node/common/clock.h"
#include "node/engine/limiter.h"
#include "storage/store.h"

namespace tally {

class Persister {
 public:
  struct Options {
    int64_t flush_interval_ms = 1'000;
    // See above; at or below flush_interval_ms, every flush writes them.
    int64_t peer_flush_interval_ms = 10'000;
    int64_t compaction_interval_ms = 600'000;  // 0: never
    // Times how long writes have been failing and the final write. Not owned;
    // must outlive the Persister.
    const Clock* clock = SystemClock::Default();
  };
  struct Stats {
    uint64_t flushes = 0;  // runs written, checkpoints included
    uint64_t checkpoints = 0;
    uint64_t keys_written = 0;  // records in those runs
    uint64_t write_errors = 0;  // failed runs
    bool unsaved = false;       // a write failed; the next flush writes a checkpoint
    bool degraded = false;      // the last write failed: what changed since the last
                                // that succeeded is in memory only
  };

  // limiter and store must outlive the Persister.
  Persister(const Options& options, Limiter* limiter, storage::Store* store);
  ~Persister();  // Stop()

  void Start();
  // Stops the threads, then writes what changed and a checkpoint (above).
  // OK when everything is on disk, else the error; it logs what it wrote.
  // Later calls do nothing.
  Status Stop();
  // Collects and writes the changes now, or a checkpoint when one is due
  // (the flush thread calls this).
  Status Flush();
  // Writes a checkpoint of every live key now.
  Status Checkpoint();

  Stats stats() const;

 private:
  // Runs work every interval_ms on the calling thread until Stop.
  void Every(int64_t interval_ms, const std::function<void()>& work);
  // With flush_mu_ held: begins a run, fills it with collect(run), commits
  // it unless it is an empty delta, and counts the outcome.
  Status WriteRun(bool checkpoint, const std::function<void(storage::Store::Run*)>& collect);
  Status CheckpointLocked();
  // with_peer_changes: the peers' slots that changed alone too (and then
  // last_peer_write_ms_ moves on).
  Status WriteChangesLocked(bool with_peer_changes);
  // With flush_mu_ and stats_mu_ held, stats_ updated: logs a failed write,
  // or the first that succeeds after failures.
  void LogOutcome(const Status& status, bool was_degraded);

  const Options options_;
  Limiter* const limiter_;
  storage::Store* const store_;

  std::mutex mu_;  // guards stop_; the threads wait on wake_ with it
  std::condition_variable wake_;
  bool stop_ = false;
  bool stopped_ = false;                // Stop has run; guarded by mu_
  std::mutex flush_mu_;                 // one write at a time; guards unsaved_
  bool unsaved_ = false;                // a write failed: changes it held are no longer marked
  uint64_t erasures_checkpointed_ = 0;  // Limiter::erasures() at the last checkpoint; flush_mu_
  // Guarded by flush_mu_: when the writes began to fail, and the last failure was logged.
  int64_t failing_since_ms_ = 0, failure_logged_ms_ = 0;  // Options::clock's MonotonicMs
  bool last_writes_ = false;                              // Stop is writing; guarded by flush_mu_
  // When peer changes were last collected (Options::clock's MonotonicMs;
  // the start counts: nothing waited before it); guarded by flush_mu_.
  int64_t last_peer_write_ms_;
  mutable std::mutex stats_mu_;  // guards stats_; never held across I/O
  Stats stats_;
  std::thread flush_thread_;
  std::thread compaction_thread_;
};

}  // namespace tally
