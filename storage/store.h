// Store: the node's counters in RocksDB (one data directory per node).
//
// Writes: Write() stores a batch of snapshots as one run (storage/run.h) in
// one WriteBatch, through the WAL; with Options::sync each batch is also
// fsynced (survives a power loss), without it a batch survives a crash of the
// process but not of the machine. WriteCheckpoint() stores the whole live
// state as one run and, in the same atomic batch, deletes every earlier run
// (a range delete): that is how expired and overwritten state leaves the
// database. Load() reads the newest checkpoint, then the runs after it in
// order, so a later snapshot of a key wins over an earlier one.
//
// Size: CheckpointDue() says when the runs since the last checkpoint hold as
// many bytes as it (at least kMinCheckpointBytes): a caller that then writes
// a checkpoint keeps the database under about twice its live state, plus
// what RocksDB has not compacted yet.
//
// Open refuses (and the daemon does not start) when the directory is held by
// another process (RocksDB's LOCK), cannot be created or written, holds a
// database that is not tally's (or of another format version), or RocksDB
// reports corruption. A record that does not decode is skipped at Load and
// counted, not fatal.
//
// Thread safety: Write, WriteCheckpoint, Load and CheckpointDue are for one
// caller at a time; DiskBytes and Compact may run concurrently with them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "node/clock.h"
#include "node/g_counter.h"
#include "node/key_snapshot.h"
#include "node/status.h"

namespace rocksdb {
class DB;
}

namespace tally::storage {

class Store {
 public:
  struct Options {
    std::string path;
    bool sync = false;
    const Clock* clock = SystemClock::Default();  // for the expiry of records; must outlive the Store
    // Write refuses (IOError) while the disk has less than this free, before
    // RocksDB runs out of space: RocksDB stops all writes after an out-of-
    // space error until its own recovery, which polls every few seconds.
    uint64_t min_free_bytes = 32ull << 20;
  };

  static Status Open(const Options& options, std::unique_ptr<Store>* store);
  // Flushes RocksDB's memtable, which makes the next Open fast.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The node id this data directory belongs to. On first use it records
  // `wanted` (0: a random id). Later, `wanted` must be 0 or the same id:
  // a directory is never silently taken over by another identity.
  Status LoadNodeId(NodeId wanted, NodeId* node_id);

  // Writes the snapshots as one run (nothing when the disk is nearly full).
  Status Write(std::span<const KeySnapshot> snapshots);
  // Writes `all`, every live key's state, as a run that replaces all earlier ones.
  Status WriteCheckpoint(std::span<const KeySnapshot> all);
  bool CheckpointDue() const;

  struct LoadStats {
    uint64_t records = 0;   // records read
    uint64_t restored = 0;  // handed to `restore` and accepted by it
    uint64_t expired = 0;   // skipped: nothing in them counts any more
    uint64_t corrupt = 0;   // skipped: did not decode (logged by the caller)
    uint64_t refused = 0;   // `restore` returned an error (e.g. the key cap)
  };
  // Calls restore(snapshot) for every record that has not expired: the newest
  // checkpoint's, then those of later runs, oldest first.
  Status Load(const std::function<Status(const KeySnapshot&)>& restore, LoadStats* stats);

  // Compacts the whole database, which frees the space of deleted runs now.
  Status Compact();
  // Bytes on disk: SST files plus write-ahead logs.
  uint64_t DiskBytes() const;

  static constexpr uint64_t kMinCheckpointBytes = 4 << 20;

 private:
  explicit Store(const Options& options);
  Status WriteRun(std::span<const KeySnapshot> snapshots, bool checkpoint);

  const Options options_;
  std::unique_ptr<rocksdb::DB> db_;
  // Owned by the one caller of Write, WriteCheckpoint and Load.
  uint64_t next_sequence_ = 1;
  uint64_t checkpoint_sequence_ = 0;  // 0: none yet
  uint64_t checkpoint_bytes_ = 0;
  uint64_t bytes_since_checkpoint_ = 0;
};

}  // namespace tally::storage
