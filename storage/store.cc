#include "storage/store.h"

#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include <sys/statvfs.h>
#include <random>

#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include "storage/record.h"

namespace tally::storage {
namespace {

const std::string kFormatKey = std::string(1, kMetaPrefix) + "format";
const std::string kFormatValue = "tally-1";
const std::string kNodeIdKey = std::string(1, kMetaPrefix) + "node_id";

// Drops records whose expiry has passed. Values only: tally writes no merge
// operands, so FilterMergeOperand never sees one of ours.
class ExpiryFilter : public rocksdb::CompactionFilter {
 public:
  explicit ExpiryFilter(const Clock* clock) : clock_(clock) {}
  bool Filter(int /*level*/, const rocksdb::Slice& key, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    if (key.empty() || key[0] != kRecordPrefix) return false;
    const std::optional<int64_t> expires_at_ms =
        RecordExpiresAtMs(std::string_view(value.data(), value.size()));
    return expires_at_ms && *expires_at_ms <= clock_->WallMs();
  }
  const char* Name() const override { return "tally.ExpiryFilter"; }

 private:
  const Clock* clock_;
};

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

Status FromRocks(const rocksdb::Status& status, const std::string& what) {
  if (status.ok()) return Status::OK();
  const std::string message = what + ": " + status.ToString();
  if (status.IsCorruption()) return Status::Corruption(message);
  if (status.IsIOError() && status.ToString().find("lock") != std::string::npos) {
    return Status::Unavailable(message + " (is another tallyd using this data directory?)");
  }
  return Status::IOError(message);
}

}  // namespace

Store::Store(const Options& options) : options_(options) {}

Store::~Store() {
  // Moves the memtable into sorted files, so that the next start reads them
  // directly instead of replaying (and sorting) the write-ahead log.
  if (db_) db_->Flush(rocksdb::FlushOptions());
}

Status Store::Open(const Options& options, std::unique_ptr<Store>* store) {
  std::unique_ptr<Store> opened(new Store(options));
  opened->filter_ = std::make_unique<ExpiryFilter>(options.clock);

  std::error_code ignored;
  std::filesystem::create_directories(options.path, ignored);  // RocksDB creates only the last level
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.info_log = std::make_shared<SpdlogLogger>();
  // A smaller memtable than the default 64 MiB: flushes are bulk anyway, and
  // RocksDB resumes after a full disk once this much space is free again.
  db_options.write_buffer_size = 16 << 20;
  db_options.compaction_filter = opened->filter_.get();
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 2;
  db_options.compression = rocksdb::kLZ4Compression;
  // Writes are bulk batches from one thread and reads happen only at start:
  // an unsorted vector memtable (sorted once, when flushed) inserts in O(1),
  // where the default skip list spends most of a flush comparing keys.
  db_options.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  db_options.allow_concurrent_memtable_write = false;
  rocksdb::DB* db = nullptr;
  if (Status status = FromRocks(rocksdb::DB::Open(db_options, options.path, &db),
                                "cannot open data directory " + options.path);
      !status.ok()) {
    return status;
  }
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
    if (Status status = FromRocks(db->Put(rocksdb::WriteOptions(), kFormatKey, kFormatValue),
                                  "cannot write to " + options.path);
        !status.ok()) {
      return status;
    }
  } else if (!read.ok() || format != kFormatValue) {
    return Status::Corruption(options.path + " holds data of an unknown format '" + format + "'");
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
  if (Status status = FromRocks(db_->Put(sync, kNodeIdKey, std::to_string(id)),
                                "cannot record the node id");
      !status.ok()) {
    return status;
  }
  *node_id = id;
  return Status::OK();
}

Status Store::Write(std::span<const KeySnapshot> snapshots) {
  struct statvfs disk {};
  if (statvfs(options_.path.c_str(), &disk) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
    if (free_bytes < options_.min_free_bytes) {
      return Status::IOError("disk nearly full: " + std::to_string(free_bytes) + " bytes free at " +
                             options_.path + ", keeping at least " +
                             std::to_string(options_.min_free_bytes) + "; not written");
    }
  }
  rocksdb::WriteBatch batch;
  std::string key, value;  // reused: no allocation per record
  for (const KeySnapshot& snapshot : snapshots) {
    key.clear();
    value.clear();
    AppendRecordKey(snapshot, &key);
    AppendRecordValue(snapshot, &value);
    batch.Put(key, value);
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = options_.sync;
  rocksdb::Status status = db_->Write(write_options, &batch);
  if (!status.ok() && db_->Resume().ok()) {
    status = db_->Write(write_options, &batch);  // the error had cleared (space freed)
  }
  return FromRocks(status, "write to " + options_.path);
}

Status Store::Load(const std::function<Status(const KeySnapshot&)>& restore, LoadStats* stats) {
  *stats = LoadStats();
  // Move what the write-ahead log replayed into sorted files first: iterating
  // the vector memtable would sort it on every iterator step's behalf.
  if (Status status = FromRocks(db_->Flush(rocksdb::FlushOptions()), "flushing " + options_.path);
      !status.ok()) {
    return status;
  }
  const int64_t now_ms = options_.clock->WallMs();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  KeySnapshot snapshot;
  for (it->Seek(std::string(1, kRecordPrefix)); it->Valid() && it->key()[0] == kRecordPrefix;
       it->Next()) {
    ++stats->records;
    const std::string_view value(it->value().data(), it->value().size());
    const std::optional<int64_t> expires_at_ms = RecordExpiresAtMs(value);
    if (expires_at_ms && *expires_at_ms <= now_ms) {
      ++stats->expired;
      continue;
    }
    if (!DecodeRecord(std::string_view(it->key().data(), it->key().size()), value, &snapshot).ok()) {
      ++stats->corrupt;
      continue;
    }
    if (restore(snapshot).ok()) {
      ++stats->restored;
    } else {
      ++stats->refused;
    }
  }
  return FromRocks(it->status(), "reading " + options_.path);
}

Status Store::CompactExpired() {
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
