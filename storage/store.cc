#include "storage/store.h"

#include <filesystem>
#include <random>

#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

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

Store::~Store() = default;

Status Store::Open(const Options& options, std::unique_ptr<Store>* store) {
  std::unique_ptr<Store> opened(new Store(options));
  opened->filter_ = std::make_unique<ExpiryFilter>(options.clock);

  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.compaction_filter = opened->filter_.get();
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 2;
  db_options.compression = rocksdb::kLZ4Compression;
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
  rocksdb::WriteBatch batch;
  for (const KeySnapshot& snapshot : snapshots) {
    batch.Put(EncodeRecordKey(snapshot), EncodeRecordValue(snapshot));
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = options_.sync;
  return FromRocks(db_->Write(write_options, &batch), "write to " + options_.path);
}

Status Store::Load(const std::function<Status(const KeySnapshot&)>& restore, LoadStats* stats) {
  *stats = LoadStats();
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
