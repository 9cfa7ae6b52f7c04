#include "cluster/target_session.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "protocol/codec.h"
#include "protocol/frame_buffer.h"
#include "protocol/messages.h"
#include "protocol/resp.h"

namespace tally::cluster {
namespace {

using protocol::AppendCommand;
using protocol::RespParse;
using protocol::RespReader;
using protocol::RespValue;

// What Redis users run today for a sliding window counter: two GETs, then
// INCR and PEXPIRE when the weighted estimate leaves room.
constexpr std::string_view kSlidingWindowScript = R"lua(
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = math.floor(now_ms / window_ms)
local elapsed_ms = now_ms - window * window_ms
local current_key = KEYS[1] .. ':' .. window
local previous_key = KEYS[1] .. ':' .. (window - 1)
local current = tonumber(redis.call('GET', current_key) or '0')
local previous = tonumber(redis.call('GET', previous_key) or '0')
if current + previous * (window_ms - elapsed_ms) / window_ms + 1 <= limit then
  redis.call('INCR', current_key)
  redis.call('PEXPIRE', current_key, 2 * window_ms)
  return 1
end
return 0
)lua";

class TallySession : public Session {
 public:
  TallySession(const LoadOptions& options, const KeySpace& keys, uint64_t seed)
      : keys_(keys, seed),
        key_names_(keys),
        batch_(static_cast<size_t>(options.batch)),
        count_denied_keys_(options.count_denied_keys) {
    request_.kind = protocol::RequestKind::kCheck;
    request_.checks.resize(batch_, protocol::Check{{}, options.spec, 1});
  }

  void AppendRequest(std::string* out) override {
    request_.id = next_request_id_++;
    for (protocol::Check& check : request_.checks) {
      const size_t key = keys_.NextIndex();
      check.key = key_names_.name(key);
      if (count_denied_keys_) keys_in_flight_.push_back(key);
    }
    protocol::EncodeRequest(request_, out);
  }
  std::span<std::byte> writable() override { return buffer_.writable(); }
  void Commit(size_t received_bytes) override { buffer_.Commit(received_bytes); }

  Status TakeReply(bool* done, ReplyCounts* counts) override {
    const protocol::FrameScan scan = protocol::ScanFrame(buffer_.readable(), limits_);
    *done = scan.state == protocol::FrameScan::State::kComplete;
    if (scan.state == protocol::FrameScan::State::kInvalid) {
      return Status::Corruption("tally sent an invalid frame: " + scan.error_message);
    }
    if (!*done) return Status::OK();
    const Status decoded =
        protocol::DecodeResponse(buffer_.readable().first(scan.frame_bytes), limits_, &response_);
    buffer_.Consume(scan.frame_bytes);
    if (!decoded.ok()) {
      return Status::Corruption("tally sent an undecodable response: " +
                                std::string(decoded.message()));
    }
    if (response_.id != next_response_id_) {
      return Status::Corruption("tally answered request " + std::to_string(response_.id) +
                                " where " + std::to_string(next_response_id_) + " was expected" +
                                (response_.kind == protocol::ResponseKind::kError
                                     ? " (error: " + response_.error_message + ")"
                                     : ""));
    }
    ++next_response_id_;
    switch (response_.kind) {
      case protocol::ResponseKind::kError:
        counts->CountError(std::string(protocol::ErrorCodeName(response_.error)) + ": " +
                           response_.error_message);
        return Status::OK();
      case protocol::ResponseKind::kCheck: break;
      case protocol::ResponseKind::kStats:
      case protocol::ResponseKind::kPolicyCheck:
      case protocol::ResponseKind::kInspect:
      case protocol::ResponseKind::kReset:
      case protocol::ResponseKind::kForgetMember:
        return Status::Corruption("tally answered a check with another kind of response");
    }
    if (response_.outcomes.size() != batch_) {
      return Status::Corruption("tally answered " + std::to_string(response_.outcomes.size()) +
                                " checks of " + std::to_string(batch_));
    }
    for (const protocol::CheckOutcome& outcome : response_.outcomes) {
      if (outcome.error != protocol::ErrorCode::kOk) {
        counts->CountError(std::string(protocol::ErrorCodeName(outcome.error)) + ": " +
                           outcome.error_message);
      } else if (outcome.decision.allowed) {
        ++counts->allowed;
      } else {
        ++counts->denied;
      }
      if (!count_denied_keys_) continue;
      if (counts->denied_keys.empty()) counts->denied_keys.resize(key_names_.size());
      if (!outcome.decision.allowed) counts->denied_keys[keys_in_flight_.front()] = true;
      keys_in_flight_.pop_front();
    }
    return Status::OK();
  }

 private:
  KeyChooser keys_;
  const KeySpace& key_names_;
  const size_t batch_;
  const bool count_denied_keys_;
  std::deque<size_t> keys_in_flight_;  // with count_denied_keys_: the keys sent, oldest first
  const protocol::FrameLimits limits_;
  protocol::Request request_;  // reused: only the id and the keys change
  protocol::Response response_;
  protocol::FrameBuffer buffer_;
  uint64_t next_request_id_ = 1;
  uint64_t next_response_id_ = 1;
};

// redis-lua: EVALSHA of kSlidingWindowScript (SCRIPT LOAD as the handshake).
// redis-incr: INCR, allowed while the count is within the limit.
class RedisSession : public Session {
 public:
  RedisSession(const LoadOptions& options, const KeySpace& keys, uint64_t seed)
      : keys_(keys, seed),
        key_names_(keys),
        lua_(options.target == LoadTarget::kRedisLua),
        limit_(options.spec.limit),
        limit_text_(std::to_string(options.spec.limit)),
        window_ms_text_(std::to_string(options.spec.window_ms)) {}

  void AppendHandshake(std::string* out) override {
    if (!lua_) return;
    const std::string_view args[] = {"SCRIPT", "LOAD", kSlidingWindowScript};
    AppendCommand(args, out);
  }

  Status TakeHandshakeReply(bool* done) override {
    if (!lua_) return Session::TakeHandshakeReply(done);
    RespValue reply;
    Status taken = Take(&reply, done);
    if (!taken.ok() || !*done) return taken;
    if (reply.type != RespValue::Type::kBulkString || reply.text.empty()) {
      return Status::Corruption("SCRIPT LOAD failed: " + std::string(reply.text));
    }
    script_sha_ = reply.text;
    return Status::OK();
  }

  void AppendRequest(std::string* out) override {
    const std::string_view key = key_names_.name(keys_.NextIndex());
    if (lua_) {
      const std::string_view args[] = {"EVALSHA", script_sha_, "1",
                                       key,       limit_text_, window_ms_text_};
      AppendCommand(args, out);
    } else {
      const std::string_view args[] = {"INCR", key};
      AppendCommand(args, out);
    }
  }
  std::span<std::byte> writable() override { return reader_.writable(); }
  void Commit(size_t received_bytes) override { reader_.Commit(received_bytes); }

  Status TakeReply(bool* done, ReplyCounts* counts) override {
    RespValue reply;
    Status taken = Take(&reply, done);
    if (!taken.ok() || !*done) return taken;
    if (reply.type == RespValue::Type::kError) {
      counts->CountError(reply.text);
      return Status::OK();
    }
    const bool valid = reply.type == RespValue::Type::kInteger && reply.integer >= 0 &&
                       (!lua_ || reply.integer <= 1);
    if (!valid) {
      return Status::Corruption(std::string("Redis sent an unexpected reply to ") +
                                (lua_ ? "EVALSHA" : "INCR"));
    }
    const bool allowed = lua_ ? reply.integer == 1 : static_cast<uint64_t>(reply.integer) <= limit_;
    ++(allowed ? counts->allowed : counts->denied);
    return Status::OK();
  }

 private:
  Status Take(RespValue* reply, bool* done) {
    const RespParse parse = reader_.Next(reply);
    *done = parse.state == RespParse::State::kComplete;
    if (parse.state == RespParse::State::kInvalid) {
      return Status::Corruption("Redis sent an invalid reply: " + parse.error_message);
    }
    return Status::OK();
  }

  KeyChooser keys_;
  const KeySpace& key_names_;
  const bool lua_;
  const uint64_t limit_;
  const std::string limit_text_;
  const std::string window_ms_text_;
  std::string script_sha_;
  RespReader reader_;
};

}  // namespace

KeySpace::KeySpace(const LoadOptions& options) : names_(options.keys) {
  for (uint64_t i = 0; i < options.keys; ++i) names_[i] = "k:" + std::to_string(i);
  if (options.distribution != KeyDistribution::kZipf) return;
  cdf_.resize(options.keys);
  double sum = 0;
  for (uint64_t i = 0; i < options.keys; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), options.zipf_s);
    cdf_[i] = sum;
  }
  for (double& p : cdf_) p /= sum;
  cdf_.back() = 1.0;
}

KeyChooser::KeyChooser(const KeySpace& space, uint64_t seed)
    : space_(space), random_(seed), uniform_index_(0, space.size() - 1) {}

size_t KeyChooser::NextIndex() {
  const std::vector<double>& cdf = space_.cdf();
  if (cdf.empty()) return uniform_index_(random_);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(random_);
  return static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
}

void ReplyCounts::CountError(std::string_view message) {
  if (errors++ == 0) first_error = message;
}

void ReplyCounts::Merge(const ReplyCounts& other) {
  allowed += other.allowed;
  denied += other.denied;
  if (errors == 0) first_error = other.first_error;
  errors += other.errors;
  if (denied_keys.size() < other.denied_keys.size()) denied_keys.resize(other.denied_keys.size());
  for (size_t key = 0; key < other.denied_keys.size(); ++key) {
    if (other.denied_keys[key]) denied_keys[key] = true;
  }
}

Status Session::TakeHandshakeReply(bool* done) {
  *done = true;
  return Status::OK();
}

std::unique_ptr<Session> NewSession(const LoadOptions& options, const KeySpace& keys,
                                    uint64_t seed) {
  if (options.target == LoadTarget::kTally)
    return std::make_unique<TallySession>(options, keys, seed);
  return std::make_unique<RedisSession>(options, keys, seed);
}

}  // namespace tally::cluster
