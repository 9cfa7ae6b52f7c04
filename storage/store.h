// Store: the node's counters in RocksDB (one data directory per node).
//
// Writes: Write() puts a batch of snapshots in one WriteBatch, through the
// WAL; with Options::sync each batch is also fsynced (survives a power loss),
// without it a batch survives a crash of the process but not of the machine.
// Expired records are dropped by a compaction filter (they carry their expiry
// time), so the database shrinks with the engine; CompactExpired() forces it.
//
// Open refuses (and the daemon does not start) when the directory is held by
// another process (RocksDB's LOCK), cannot be created or written, holds a
// database that is not tally's, or RocksDB reports corruption. A single
// record that does not decode is skipped at Load and counted, not fatal.
//
// Thread safety: all methods may be called from any thread (RocksDB's own
// guarantees); Write and Load are not meant to overlap.
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
class CompactionFilter;
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

  // Writes the snapshots in one batch (nothing when the disk is nearly full).
  Status Write(std::span<const KeySnapshot> snapshots);

  struct LoadStats {
    uint64_t records = 0;   // records read
    uint64_t restored = 0;  // handed to `restore` and accepted by it
    uint64_t expired = 0;   // skipped: nothing in them counts any more
    uint64_t corrupt = 0;   // skipped: did not decode (logged by the caller)
    uint64_t refused = 0;   // `restore` returned an error (e.g. the key cap)
  };
  // Calls restore(snapshot) for every record that has not expired.
  Status Load(const std::function<Status(const KeySnapshot&)>& restore, LoadStats* stats);

  // Compacts the whole database, which drops every expired record now.
  Status CompactExpired();
  // Bytes on disk: SST files plus write-ahead logs.
  uint64_t DiskBytes() const;

 private:
  explicit Store(const Options& options);

  const Options options_;
  std::unique_ptr<rocksdb::CompactionFilter> filter_;  // declared first: outlives db_
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace tally::storage
