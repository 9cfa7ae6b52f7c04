// The wire side of the load generator: per target (tally, redis-lua,
// redis-incr), how a request is encoded and how a reply is read and counted.
// No I/O here: loadgen.cc moves the bytes.
//
// Thread safety: a KeySpace is built before the run and only read after, by
// every thread. A Session (and its KeyChooser) belongs to one connection and
// is used by that connection's event-loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/loadgen.h"
#include "node/common/status.h"

namespace tally::cluster {

// The key names "k:<index>" and, for zipf, the cumulative distribution over
// them (index 0 the most frequent).
class KeySpace {
 public:
  explicit KeySpace(const LoadOptions& options);

  size_t size() const { return names_.size(); }
  const std::string& name(size_t index) const { return names_[index]; }
  const std::vector<double>& cdf() const { return cdf_; }  // empty: uniform

 private:
  std::vector<std::string> names_;
  std::vector<double> cdf_;
};

// Draws keys from a KeySpace with its own generator.
class KeyChooser {
 public:
  KeyChooser(const KeySpace& space, uint64_t seed);
  // The next key's index in the KeySpace.
  size_t NextIndex();

 private:
  const KeySpace& space_;
  std::mt19937_64 random_;
  std::uniform_int_distribution<size_t> uniform_index_;
};

// What the replies said, summed over the replies a Session took.
struct ReplyCounts {
  uint64_t allowed = 0;
  uint64_t denied = 0;
  uint64_t errors = 0;      // error replies and, for tally, per-check errors
  std::string first_error;  // the first of them, for the report
  // By key index, whether a check on it was denied; empty unless the session
  // counts denied keys (LoadOptions::count_denied_keys).
  std::vector<bool> denied_keys;

  void CountError(std::string_view message);
  void Merge(const ReplyCounts& other);
};

// Encodes requests and takes replies off its own receive buffer. A non-OK
// Status means the peer said something the generator does not expect.
class Session {
 public:
  virtual ~Session() = default;

  // Bytes to send right after connecting, answered before the clock starts
  // (redis-lua: SCRIPT LOAD); none by default.
  virtual void AppendHandshake(std::string* out) {}
  // Takes the handshake's reply; *done once it has been taken.
  virtual Status TakeHandshakeReply(bool* done);

  virtual void AppendRequest(std::string* out) = 0;
  // Receiving: fill writable(), then Commit what arrived.
  virtual std::span<std::byte> writable() = 0;
  virtual void Commit(size_t received_bytes) = 0;
  // Takes the next complete reply into *counts; *done false when none is.
  virtual Status TakeReply(bool* done, ReplyCounts* counts) = 0;
};

// A session for options.target; `keys` must outlive it.
std::unique_ptr<Session> NewSession(const LoadOptions& options, const KeySpace& keys,
                                    uint64_t seed);

}  // namespace tally::cluster
