// Store: the node's counters in RocksDB (one data directory per node).
//
// Writes: a run (storage/run.h) is begun with BeginRun, snapshots are added
// to it (encoded at once, so that no snapshot needs to be kept), and Commit
// writes it in one WriteBatch through the WAL; with Options::sync each batch
// is also fsynced (survives a power loss), without it a batch survives a
// crash of the process but not of the machine. A checkpoint run holds the
// whole live state and, in the same atomic batch, deletes every earlier run
// (a range delete): that is how expired and overwritten state leaves the
// database. Load() reads the newest checkpoint, then the runs after it in
// order, so a later snapshot of a key wins over an earlier one.
//
// Size: CheckpointDue() says when the runs since the last checkpoint hold as
// many bytes as it (at least kMinCheckpointBytes): a caller that then writes
// a checkpoint keeps the database under about twice its live state, plus
// what RocksDB has not compacted yet.
//
// Disk space: while running, runs leave Options::min_free_bytes free, and a
// reserve file in the directory holds Options::reserve_bytes more. After
// BeginLastWrites (at shutdown) a run needs only its own size and a small
// slack, and the reserve is given up when that is what it takes.
//
// Open refuses (and the daemon does not start) when the directory is held by
// another process (RocksDB's LOCK), cannot be created or written, leaves no
// room to persist (less than min_free_bytes free once RocksDB's files and the
// reserve are in place: no run could ever be written), holds a
// database that is not tally's (or of another format version), or RocksDB
// reports corruption (Corruption, saying the database is damaged; with the
// way out, Options::salvage_wal, when the damage is in the write-ahead log).
// A batch cut short at the very end of the write-ahead log, as a crash during
// a write leaves it, is dropped: that is the flush a crash loses. A record
// that does not decode or frame is skipped at Load, counted and, when its key
// can be read, named (LoadStats), not fatal; the others of its run load
// (storage/run.h).
//
// Thread safety: BeginRun, Commit, BeginLastWrites, Load and CheckpointDue
// are for one caller at a time; DiskBytes and Compact may run concurrently
// with them. A Run is a value owned by its caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "node/common/clock.h"
#include "node/common/crash_loss.h"
#include "node/common/g_counter.h"
#include "node/common/key_snapshot.h"
#include "node/common/status.h"
#include "storage/run.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace tally::storage {

// The data directory's format marker this build writes and reads (RocksDB key
// `m` `format`); directories of the markers before it are moved to it at
// Open, and once moved are refused by builds before this one.
inline constexpr char kFormatMarker[] = "tally-4";

class Store {
 public:
  struct Options {
    std::string path;
    bool sync = false;
    const Clock* clock =
        SystemClock::Default();  // for the expiry of records; must outlive the Store
    // BeginRun and Commit refuse (IOError) while the disk would have less
    // than this free, before RocksDB runs out of space: after an out-of-space
    // error in its write-ahead log RocksDB refuses every write, and in this
    // version does not recover within the process.
    uint64_t min_free_bytes = 32ull << 20;
    // Held in the file kReserveFile of the data directory for the writes at
    // shutdown (BeginLastWrites); 0: none. Open makes it, or refuses.
    uint64_t reserve_bytes = 8ull << 20;
    // What Open does with a write-ahead log that is damaged (not merely cut
    // short at its end by a crash): false refuses (Corruption, saying so);
    // true skips the damaged records and replays the intact ones (RocksDB
    // logs the bytes it drops; Load reports the runs that are missing).
    bool salvage_wal = false;
  };

  static Status Open(const Options& options, std::unique_ptr<Store>* store);
  // Flushes RocksDB's memtable, which makes the next Open fast (unless the
  // disk has less than min_free_bytes free: then the next Open replays the
  // write-ahead log instead).
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Whether Open skipped damaged records of the write-ahead log (only with
  // Options::salvage_wal, and only when the log was damaged).
  bool wal_salvaged() const { return wal_salvaged_; }

  // The node id this data directory belongs to. On first use it records
  // `wanted` (0: a random id). Later, `wanted` must be 0 or the same id:
  // a directory is never silently taken over by another identity.
  Status LoadNodeId(NodeId wanted, NodeId* node_id);

  // Whether the process that last served from this directory stopped
  // cleanly: *crashed is true when it began serving (BeginServing) and never
  // said it stopped (MarkStopped), false for a new directory. Then records
  // that a process serves from it now, until MarkStopped.
  Status BeginServing(bool* crashed);
  // Everything the serving process admitted is on disk: the next
  // BeginServing reports no crash.
  Status MarkStopped();

  // The crash losses this node knows (node/common/crash_loss.h), replaced
  // whole and written synced: they are few and change only when a member
  // crashes. A new directory has none; stored bytes that do not decode are
  // Corruption (the node then starts knowing only what its peers tell it).
  Status SaveCrashLosses(std::span<const CrashLoss> losses);
  Status LoadCrashLosses(std::vector<CrashLoss>* losses);

  // One run being built. Add encodes a snapshot into it; nothing reaches
  // RocksDB before Store::Commit.
  class Run {
   public:
    ~Run();
    Run(const Run&) = delete;
    Run& operator=(const Run&) = delete;
    void Add(const KeySnapshot& snapshot);
    uint64_t records() const { return records_; }

   private:
    friend class Store;
    Run(uint64_t sequence, bool checkpoint);
    void PutPart();

    const uint64_t sequence_;
    const bool checkpoint_;  // every live key; replaces all earlier runs
    std::unique_ptr<rocksdb::WriteBatch> batch_;
    PartBuilder builder_;
    uint32_t parts_ = 0;
    uint64_t bytes_ = 0;
    uint64_t records_ = 0;
  };

  // Begins the next run; fails (IOError) at once when the disk is nearly full.
  Status BeginRun(bool checkpoint, std::unique_ptr<Run>* run);
  // Writes the run atomically. A failed run may be dropped: the next run
  // continues the sequence as if it had never begun.
  Status Commit(Run* run);
  // From now on runs may use the space kept free while running, and the
  // reserve: for the last writes before the process exits, when it no longer
  // matters that RocksDB would not recover from running out of space.
  void BeginLastWrites() { last_writes_ = true; }
  bool CheckpointDue() const;

  struct LoadStats {
    uint64_t records = 0;   // records read
    uint64_t restored = 0;  // handed to `restore` and accepted by it
    uint64_t expired = 0;   // skipped: nothing in them counts any more
    uint64_t corrupt = 0;   // skipped: did not decode or could not be framed (the caller logs it)
    // The keys (as stored: any bytes) of the first kLostKeysNamed corrupt
    // records whose key could be read, and how many of the corrupt records
    // had a key that could not be read (DescribeLostKeys puts both in words).
    static constexpr size_t kLostKeysNamed = 5;
    std::vector<std::string> lost_keys;
    uint64_t corrupt_unnamed = 0;
    uint64_t refused = 0;   // `restore` returned an error (e.g. the key cap)
    uint64_t last_run = 0;  // the sequence of the newest run read; 0: none
    // Runs absent between the checkpoint and last_run, as [first, last]
    // ranges. Sequences are consecutive, so each is a lost run: a batch that
    // a salvage of the write-ahead log dropped.
    std::vector<std::pair<uint64_t, uint64_t>> missing_runs;
  };
  // How far a Load is: records read so far, and an estimate of how many it
  // reads in all: the parts to read (counted with two seeks per run before
  // the Load starts) times the records per part read so far. Parts are full
  // but for the last of each run, so many small runs since the checkpoint
  // (after a crash) make the estimate high.
  struct LoadProgress {
    uint64_t records = 0;
    uint64_t estimated_records = 0;
  };
  // Calls restore(snapshot) for every record that has not expired: the newest
  // checkpoint's, then those of later runs, oldest first; and progress (if
  // set) after each part (about 1 MiB of records).
  Status Load(const std::function<Status(const KeySnapshot&)>& restore, LoadStats* stats,
              const std::function<void(const LoadProgress&)>& progress = {});

  // Compacts the whole database, which frees the space of deleted runs now.
  Status Compact();
  // Bytes on disk: SST files plus write-ahead logs.
  uint64_t DiskBytes() const;

  static constexpr uint64_t kMinCheckpointBytes = 4 << 20;
  // What a last write leaves free beyond itself (RocksDB's log framing).
  static constexpr uint64_t kLastWriteSlackBytes = 256 << 10;
  static constexpr const char* kReserveFile = "tally-reserve";

 private:
  explicit Store(const Options& options);
  // IOError unless the disk has room for write_bytes and what is kept free
  // beyond them (min_free_bytes; after BeginLastWrites the slack, the
  // reserve given up if need be).
  Status CheckFreeSpace(uint64_t write_bytes);
  std::string ReservePath() const;
  // The parts of the runs Load reads (from the checkpoint on).
  uint64_t CountParts() const;

  const Options options_;
  std::unique_ptr<rocksdb::DB> db_;
  bool wal_salvaged_ = false;
  bool last_writes_ = false;  // owned by the one caller of BeginRun and Commit
  // Owned by the one caller of Write, WriteCheckpoint and Load.
  uint64_t next_sequence_ = 1;
  uint64_t checkpoint_sequence_ = 0;  // 0: none yet
  uint64_t checkpoint_bytes_ = 0;
  uint64_t bytes_since_checkpoint_ = 0;
};

// What a Load lost to damage, for the log: the first keys of the corrupt
// records (LoadStats::lost_keys, each quoted, its bytes other than printable
// ASCII escaped as \xNN, one over 64 bytes cut with "..."), how many more,
// and how many records' keys could not be read, e.g.
//   keys "user:7", "a\x00b" and 3 more; 2 records whose key cannot be read
// Empty when nothing was corrupt.
std::string DescribeLostKeys(const Store::LoadStats& stats);

}  // namespace tally::storage
