#include "storage/store.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include "node/common/varint.h"
#include "storage/disk_space.h"
#include "storage/record.h"
#include "storage/run.h"

namespace tally::storage {
namespace {

const std::string kFormatKey = std::string(1, kMetaPrefix) + "format";
// tally-1: one RocksDB value per key; tally-2: runs of format 1 only;
// tally-3: runs of format 2 (storage/run.h), and format 1 still read;
// tally-4: records of format 2 (replicated buckets, storage/record.h) too.
const std::string kFormatValue = kFormatMarker;
// Moved to tally-4 at Open.
bool IsFormatBefore(const std::string& format) {
  return format == "tally-2" || format == "tally-3";
}
const std::string kNodeIdKey = std::string(1, kMetaPrefix) + "node_id";
const std::string kCheckpointKey = std::string(1, kMetaPrefix) + "checkpoint";  // its sequence
// "serving" from BeginServing until MarkStopped, then "stopped".
const std::string kServingKey = std::string(1, kMetaPrefix) + "serving";
// The crash losses this node knows (SaveCrashLosses).
const std::string kCrashLossesKey = std::string(1, kMetaPrefix) + "crash_losses";

// RocksDB's own log goes to spdlog (warnings and errors only), not to a LOG
// file in the data directory: that file would fail, and with it RocksDB's
// error handling, exactly when the disk is full.
class SpdlogLogger : public rocksdb::Logger {
 public:
  SpdlogLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    spdlog::warn("rocksdb: {}", line);
  }
};

// For the quiet second look at a database that failed to open.
class SilentLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

std::string_view ToView(const rocksdb::Slice& slice) { return {slice.data(), slice.size()}; }

rocksdb::Options DbOptions(rocksdb::WALRecoveryMode wal_recovery_mode) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.info_log = std::make_shared<SpdlogLogger>();
  // A smaller memtable than the default 64 MiB: RocksDB resumes after a full
  // disk once this much space is free again.
  options.write_buffer_size = 16 << 20;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 2;
  options.compression = rocksdb::kLZ4Compression;
  options.wal_recovery_mode = wal_recovery_mode;
  return options;
}

// Whether the write-ahead log is what is damaged: the database opens (read
// only, changing nothing) when RocksDB skips the damaged log records.
bool OnlyWalDamaged(const std::string& path) {
  rocksdb::Options options = DbOptions(rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords);
  options.info_log = std::make_shared<SilentLogger>();  // the failed open has logged the damage
  rocksdb::DB* db = nullptr;
  const bool opened = rocksdb::DB::OpenForReadOnly(options, path, &db).ok();
  delete db;
  return opened;
}

Status FromRocks(const rocksdb::Status& status, const std::string& what) {
  if (status.ok()) return Status::OK();
  const std::string message = what + ": " + status.ToString();
  if (status.IsCorruption()) {  // a checksum that does not match, a file cut short
    return Status::Corruption(what + ": the database is damaged (RocksDB: " + status.ToString() +
                              ")");
  }
  if (status.IsIOError() && status.ToString().find("lock") != std::string::npos) {
    return Status::Unavailable(message + " (is another tallyd using this data directory?)");
  }
  return Status::IOError(message);
}

}  // namespace

Store::Store(const Options& options) : options_(options) {}

Store::~Store() {
  // Moves the memtable into sorted files, so that the next start reads them
  // directly instead of replaying the write-ahead log; on a nearly full disk
  // that would only fail (and log RocksDB's errors).
  const std::optional<uint64_t> free_bytes = FreeBytes(options_.path);
  if (db_ && (!free_bytes || *free_bytes >= options_.min_free_bytes)) {
    db_->Flush(rocksdb::FlushOptions());
  }
}

std::string Store::ReservePath() const { return options_.path + "/" + kReserveFile; }

Status Store::Open(const Options& options, std::unique_ptr<Store>* store) {
  std::unique_ptr<Store> opened(new Store(options));

  std::error_code ignored;
  std::filesystem::create_directories(options.path,
                                      ignored);  // RocksDB creates only the last level
  // The write-ahead log is replayed strictly: a batch cut short at its very
  // end (a crash during a write) is dropped, as a crash loses the flush in
  // progress; damage anywhere else fails the open. RocksDB's default, point
  // in time recovery, would instead silently stop at the damage and forget
  // every batch after it.
  rocksdb::DB* db = nullptr;
  const std::string what = "cannot open data directory " + options.path;
  Status opening = FromRocks(
      rocksdb::DB::Open(DbOptions(rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords),
                        options.path, &db),
      what);
  if (opening.code() == Status::Code::kCorruption && OnlyWalDamaged(options.path)) {
    if (!options.salvage_wal) {
      return Status::Corruption(
          std::string(opening.message()) +
          "; the damage is in its write-ahead log. Started with --salvage-wal, tallyd skips the "
          "damaged records, restores what is intact and logs what it dropped");
    }
    spdlog::warn(
        "salvaging {}: {}; skipping the damaged records of its write-ahead log "
        "(RocksDB logs the bytes it drops)",
        options.path, opening.message());
    opening =
        FromRocks(rocksdb::DB::Open(DbOptions(rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords),
                                    options.path, &db),
                  what);
    opened->wal_salvaged_ = opening.ok();
  } else if (opening.ok() && options.salvage_wal) {
    spdlog::info("--salvage-wal: the write-ahead log of {} is intact; nothing dropped",
                 options.path);
  }
  if (!opening.ok()) return opening;
  opened->db_.reset(db);

  // A directory is tally's if it carries the format marker; an empty one becomes tally's.
  std::string format;
  const rocksdb::Status read = db->Get(rocksdb::ReadOptions(), kFormatKey, &format);
  if (read.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> any(db->NewIterator(rocksdb::ReadOptions()));
    any->SeekToFirst();
    if (any->Valid()) {
      return Status::Corruption(options.path + " holds a database that is not tally's");
    }
  } else if (!read.ok()) {
    return FromRocks(read, "cannot read the format marker in " + options.path);
  } else if (format != kFormatValue && !IsFormatBefore(format)) {
    return Status::Corruption(options.path + " holds data of an unknown format '" + format +
                              "' (written by another version of tally?)");
  }
  // An older directory is marked tally-4 before any newer run or record lands in
  // it, so that an older tallyd refuses it instead of skipping those runs.
  if (format != kFormatValue) {
    if (Status status = FromRocks(db->Put(rocksdb::WriteOptions(), kFormatKey, kFormatValue),
                                  "cannot write to " + options.path);
        !status.ok()) {
      return status;
    }
  }
  // Without this room no run could ever be written: refuse rather than run
  // on unable to persist anything.
  Status room;
  if (options.reserve_bytes == 0) {
    ReleaseReserve(opened->ReservePath());  // one made before
  } else {
    room = MakeReserve(opened->ReservePath(), options.reserve_bytes);
  }
  if (room.ok()) room = opened->CheckFreeSpace(0);
  if (!room.ok()) {
    return Status::IOError("no room to persist: " + std::string(room.message()) +
                           ". tallyd needs room for RocksDB's files, a shutdown reserve of " +
                           std::to_string(options.reserve_bytes) + " bytes and " +
                           std::to_string(options.min_free_bytes) +
                           " bytes free beyond them: free space, use a larger disk, or run "
                           "--memory-only");
  }
  // Runs continue after the last one written.
  std::unique_ptr<rocksdb::Iterator> last(db->NewIterator(rocksdb::ReadOptions()));
  last->SeekForPrev(RunKey(UINT64_MAX, UINT32_MAX));
  uint64_t sequence = 0;
  uint32_t part = 0;
  if (last->Valid() && ParseRunKey(ToView(last->key()), &sequence, &part)) {
    opened->next_sequence_ = sequence + 1;
  }
  if (Status status = FromRocks(last->status(), "reading " + options.path); !status.ok()) {
    return status;
  }
  *store = std::move(opened);
  return Status::OK();
}

Status Store::LoadNodeId(NodeId wanted, NodeId* node_id) {
  std::string stored;
  const rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), kNodeIdKey, &stored);
  if (read.ok()) {
    const NodeId id = std::stoull(stored);
    if (wanted != 0 && wanted != id) {
      return Status::InvalidArgument("data directory " + options_.path + " belongs to node " +
                                     stored + ", not " + std::to_string(wanted));
    }
    *node_id = id;
    return Status::OK();
  }
  if (!read.IsNotFound()) return FromRocks(read, "cannot read the node id");
  NodeId id = wanted;
  while (id == 0) id = std::random_device()() | static_cast<NodeId>(std::random_device()()) << 32;
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (Status status =
          FromRocks(db_->Put(sync, kNodeIdKey, std::to_string(id)), "cannot record the node id");
      !status.ok()) {
    return status;
  }
  *node_id = id;
  return Status::OK();
}

Status Store::BeginServing(bool* crashed) {
  std::string stored;
  const rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), kServingKey, &stored);
  if (!read.ok() && !read.IsNotFound()) return FromRocks(read, "cannot read the serving mark");
  *crashed = read.ok() && stored == "serving";
  return FromRocks(db_->Put(rocksdb::WriteOptions(), kServingKey, "serving"),
                   "cannot record the serving mark");
}

Status Store::MarkStopped() {
  rocksdb::WriteOptions write;
  write.sync = options_.sync;
  return FromRocks(db_->Put(write, kServingKey, "stopped"), "cannot record the stop");
}

Status Store::SaveCrashLosses(std::span<const CrashLoss> losses) {
  rocksdb::WriteOptions sync;
  sync.sync = true;
  return FromRocks(db_->Put(sync, kCrashLossesKey, EncodeCrashLosses(losses)),
                   "cannot record the crash losses");
}

Status Store::LoadCrashLosses(std::vector<CrashLoss>* losses) {
  losses->clear();
  std::string stored;
  const rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), kCrashLossesKey, &stored);
  if (read.IsNotFound()) return Status::OK();
  if (!read.ok()) return FromRocks(read, "cannot read the crash losses");
  if (!DecodeCrashLosses(stored, losses))
    return Status::Corruption("stored crash losses do not decode");
  return Status::OK();
}

Store::Run::Run(uint64_t sequence, bool checkpoint)
    : sequence_(sequence),
      checkpoint_(checkpoint),
      batch_(std::make_unique<rocksdb::WriteBatch>()) {}

Store::Run::~Run() = default;

void Store::Run::Add(const KeySnapshot& snapshot) {
  builder_.Add(snapshot);
  ++records_;
  if (builder_.full()) PutPart();
}

void Store::Run::PutPart() {
  batch_->Put(RunKey(sequence_, parts_++), builder_.part());
  bytes_ += builder_.part().size();
  builder_.Clear();
}

Status Store::BeginRun(bool checkpoint, std::unique_ptr<Run>* run) {
  if (Status status = CheckFreeSpace(0); !status.ok()) return status;
  run->reset(new Run(next_sequence_, checkpoint));
  return Status::OK();
}

Status Store::CheckFreeSpace(uint64_t write_bytes) {
  const uint64_t keep_bytes = last_writes_ ? kLastWriteSlackBytes : options_.min_free_bytes;
  std::optional<uint64_t> free_bytes = FreeBytes(options_.path);
  if (free_bytes && *free_bytes < write_bytes + keep_bytes && last_writes_ &&
      ReleaseReserve(ReservePath())) {
    free_bytes = FreeBytes(options_.path);  // what the reserve was kept for
  }
  if (!free_bytes || *free_bytes >= write_bytes + keep_bytes) {
    return Status::OK();  // without an answer from the file system, RocksDB will tell
  }
  const std::string kept = std::to_string(keep_bytes) + " kept free";
  return Status::IOError("disk nearly full: " + std::to_string(*free_bytes) + " bytes free at " +
                         options_.path + ", less than " +
                         (write_bytes == 0 ? kept
                                           : "a write of " + std::to_string(write_bytes) +
                                                 " bytes and " + kept + " beyond it"));
}

bool Store::CheckpointDue() const {
  return bytes_since_checkpoint_ >= std::max(checkpoint_bytes_, kMinCheckpointBytes);
}

Status Store::Commit(Run* run) {
  if (!run->builder_.empty()) run->PutPart();
  if (Status status = CheckFreeSpace(run->bytes_); !status.ok()) return status;
  rocksdb::WriteBatch& batch = *run->batch_;
  if (run->checkpoint_) {
    batch.DeleteRange(RunKey(0, 0), RunKey(run->sequence_, 0));
    std::string encoded;
    PutBigEndian(run->sequence_, 8, &encoded);
    batch.Put(kCheckpointKey, encoded);
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = options_.sync;
  rocksdb::Status status = db_->Write(write_options, &batch);
  if (!status.ok() && db_->Resume().ok()) {
    status = db_->Write(write_options, &batch);  // the error had cleared (space freed)
  }
  if (!status.ok()) return FromRocks(status, "write to " + options_.path);
  next_sequence_ = run->sequence_ + 1;
  if (run->checkpoint_) {
    checkpoint_sequence_ = run->sequence_;
    checkpoint_bytes_ = run->bytes_;
    bytes_since_checkpoint_ = 0;
  } else {
    bytes_since_checkpoint_ += run->bytes_;
  }
  return Status::OK();
}

Status Store::Load(const std::function<Status(const KeySnapshot&)>& restore, LoadStats* stats,
                   const std::function<void(const LoadProgress&)>& progress) {
  *stats = LoadStats();
  std::string encoded;
  const rocksdb::Status read = db_->Get(rocksdb::ReadOptions(), kCheckpointKey, &encoded);
  if (!read.ok() && !read.IsNotFound()) return FromRocks(read, "reading " + options_.path);
  if (read.ok() && encoded.size() != 8) {
    return Status::Corruption(options_.path + ": the checkpoint marker is not a sequence number");
  }
  checkpoint_sequence_ = read.ok() ? GetBigEndian(encoded) : 0;
  checkpoint_bytes_ = 0;
  bytes_since_checkpoint_ = 0;
  const uint64_t parts_to_read = progress ? CountParts() : 0;  // from the checkpoint on
  uint64_t parts_read = 0;

  const int64_t now_ms = options_.clock->WallMs();
  KeySnapshot snapshot;
  // Keeps the key of a corrupt record among the first named; false when it cannot be read.
  const auto name_lost = [stats](std::string_view key) {
    const std::optional<std::string_view> user_key = RecordUserKey(key);
    if (user_key && stats->lost_keys.size() < LoadStats::kLostKeysNamed) {
      stats->lost_keys.emplace_back(*user_key);
    }
    return user_key.has_value();
  };
  auto on_record = [&](std::string_view key, std::string_view value) {
    ++stats->records;
    const std::optional<int64_t> expires_at_ms = RecordExpiresAtMs(value);
    if (expires_at_ms && *expires_at_ms <= now_ms) {
      ++stats->expired;
    } else if (!DecodeRecord(key, value, &snapshot).ok()) {
      ++stats->corrupt;
      if (!name_lost(key)) ++stats->corrupt_unnamed;
      return false;
    } else if (restore(snapshot).ok()) {
      ++stats->restored;
    } else {
      ++stats->refused;
    }
    return true;
  };
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  uint64_t next_run = checkpoint_sequence_ + 1;  // sequences are consecutive: a gap is a lost run
  for (it->Seek(RunKey(checkpoint_sequence_, 0)); it->Valid(); it->Next()) {
    uint64_t sequence = 0;
    uint32_t part = 0;
    if (!ParseRunKey(ToView(it->key()), &sequence, &part)) break;  // past the runs
    if (sequence > next_run) stats->missing_runs.emplace_back(next_run, sequence - 1);
    next_run = std::max(next_run, sequence + 1);
    stats->last_run = sequence;
    const std::string_view value = ToView(it->value());
    (sequence == checkpoint_sequence_ ? checkpoint_bytes_ : bytes_since_checkpoint_) +=
        value.size();
    uint64_t unframed = 0, named = 0;
    std::vector<std::string_view> named_first;  // into `value`
    const LostKeyCallback on_lost = [&](std::string_view key) {
      if (named++ < LoadStats::kLostKeysNamed) named_first.push_back(key);
    };
    if (!ForEachRecord(value, on_record, &unframed, on_lost).ok()) {
      stats->corrupt += unframed;
      named = std::min(named, unframed);  // past what the count says is lost, no record's key
      for (size_t i = 0; i < std::min<uint64_t>(named, named_first.size()); ++i) {
        name_lost(named_first[i]);
      }
      stats->corrupt_unnamed += unframed - named;
    }
    if (progress) {
      ++parts_read;
      const uint64_t parts = std::max(parts_read, parts_to_read);
      progress({stats->records, stats->records * parts / parts_read});
    }
  }
  return FromRocks(it->status(), "reading " + options_.path);
}

uint64_t Store::CountParts() const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  uint64_t parts = 0;
  uint64_t sequence = checkpoint_sequence_;
  uint32_t part = 0;
  for (it->Seek(RunKey(sequence, 0)); it->Valid(); it->Seek(RunKey(sequence + 1, 0))) {
    if (!ParseRunKey(ToView(it->key()), &sequence, &part)) break;  // past the runs
    it->SeekForPrev(RunKey(sequence, UINT32_MAX));                 // the run's last part
    if (!it->Valid() || !ParseRunKey(ToView(it->key()), &sequence, &part)) break;
    parts += uint64_t{part} + 1;
  }
  return parts;
}

std::string DescribeLostKeys(const Store::LoadStats& stats) {
  constexpr size_t kShownKeyBytes = 64;
  std::string out;
  for (const std::string& key : stats.lost_keys) {
    out += out.empty() ? "keys \"" : ", \"";
    for (const char c : std::string_view(key).substr(0, kShownKeyBytes)) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (c >= 0x20 && c < 0x7f) {
        out += c;
      } else {
        char escaped[5];
        std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned char>(c));
        out += escaped;
      }
    }
    out += key.size() > kShownKeyBytes ? "...\"" : "\"";
  }
  const uint64_t named = stats.corrupt - std::min(stats.corrupt_unnamed, stats.corrupt);
  if (named > stats.lost_keys.size()) {
    out += " and " + std::to_string(named - stats.lost_keys.size()) + " more";
  }
  if (stats.corrupt_unnamed > 0) {
    if (!out.empty()) out += "; ";
    out += std::to_string(stats.corrupt_unnamed);
    out += stats.corrupt_unnamed == 1 ? " record" : " records";
    out += " whose key cannot be read";
  }
  return out;
}

Status Store::Compact() {
  return FromRocks(db_->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr),
                   "compacting " + options_.path);
}

uint64_t Store::DiskBytes() const {
  uint64_t sst_bytes = 0;
  db_->GetIntProperty("rocksdb.total-sst-files-size", &sst_bytes);
  uint64_t wal_bytes = 0;
  std::error_code ec;
  for (const auto& file : std::filesystem::directory_iterator(options_.path, ec)) {
    if (file.path().extension() == ".log") wal_bytes += file.file_size(ec);
  }
  return sst_bytes + wal_bytes;
}

}  // namespace tally::storage
