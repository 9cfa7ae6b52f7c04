// StreamFront: a request/response protocol over TCP that the Server serves
// on a port of its own, on its worker threads (node/server/server.h). The
// Server owns sockets, deadlines, receive buffers, pipelining and shutdown;
// a front only turns received bytes into answers. tally's own protocol, the
// HTTP front and the RESP front are StreamFronts.
//
// Thread safety: NewSession and TooManyConnections may be called from any
// worker thread at once (a front shares nothing mutable, or synchronises it).
// A StreamSession belongs to one connection and is used only by the thread
// of that connection's worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "node/common/clock.h"
#include "node/net/rate_limited_log.h"

namespace tally {

// What the Server does with a connection after an Answer.
struct StreamProgress {
  size_t consumed_bytes = 0;   // dropped from the front of what was received
  size_t wanted_bytes = 4096;  // at least this much more is needed for the next request
  bool close = false;          // close once the output is written
};

// Why the Server refuses bytes without asking the session.
enum class StreamRefusal {
  kBufferBudget,  // the request needs more receive buffer than all connections may hold
};

class StreamSession {
 public:
  virtual ~StreamSession() = default;

  // Answers every complete request at the front of `received` (they arrived
  // in this order; requests may be pipelined), appending the answers to *out
  // in request order. Bytes of an incomplete request stay unconsumed and come
  // back with more. A request that cannot be answered may close the
  // connection (after what *out holds is written).
  virtual StreamProgress Answer(std::span<const std::byte> received, std::string* out) = 0;
  // The Server refuses to receive more (`message` says why, for the client):
  // append what the client is told; the connection closes after writing it.
  virtual void Refuse(StreamRefusal refusal, std::string_view message, std::string* out) = 0;
  // Frees scratch a large request grew, so that an idle connection keeps
  // only what small ones need. Called after each round of answers.
  virtual void TrimMemory() {}
};

// What a session may use besides its bytes. Everything is owned by the
// worker and outlives the session.
struct SessionContext {
  const std::string& peer;  // "address:port" of the client, for the log
  const Clock* clock;
  RateLimitedLog* log;  // warnings a client can provoke, at most one a second
  // An id of the worker the session lives on, 0 .. workers-1, for counters
  // kept per worker.
  size_t worker_index;
};

class StreamFront {
 public:
  virtual ~StreamFront() = default;

  // A session for a new connection, on that connection's worker thread.
  virtual std::unique_ptr<StreamSession> NewSession(const SessionContext& context) = 0;
  // What a connection refused at the port's connection limit is sent before
  // it is closed (may be empty).
  virtual std::string TooManyConnections() const = 0;
};

}  // namespace tally
