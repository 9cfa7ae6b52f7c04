// Server: serves tally's protocol over TCP (Asio, C++20 coroutines).
//
// Threads: Options::threads workers, each running its own io_context. A
// connection lives on one worker from accept to close, so all of its state
// (socket, buffers, deadline) is owned by that worker thread and needs no
// lock. The accept loop, the signal handler and the periodic sweep run on
// worker 0. Shared between workers: the Limiter (thread-safe), the per-worker
// counters (each written by its own worker only) and the receive-buffer
// budget (an atomic).
//
// Ports: tally's own protocol on Options::port (node/server/protocol_front.h)
// and, added with AddFront, other protocols (HTTP, RESP) on ports of their
// own, served by the same workers with the same rules below.
//
// Connections: responses go out in request order; requests may be pipelined.
// When the process runs out of file descriptors, accepting backs off (up to
// a second, node/net/accept_loop.h) while open connections are served.
// A connection that sends nothing for idle_timeout_ms, does not complete a
// request within frame_timeout_ms of its first byte (however slowly the
// bytes come), or does not take a response within write_timeout_ms, is
// closed. At max_connections open on a port, a new connection on that port
// gets the front's refusal (tally's protocol: an error frame,
// kResourceExhausted) and is closed. Receive buffers start at 16 KiB and
// grow only as a large request arrives, by at most max_buffer_bytes for all
// connections together: a request that needs more is refused and its
// connection closed (node/net/receive_buffer.h). Warnings a client can
// provoke (refused connections, bad requests, timeouts) are logged at most
// once a second per worker, with a count of those left out.
//
// TLS (Options::tls): every port speaks TLS only, its handshake bounded by
// frame_timeout_ms; a handshake that fails (a plaintext client, a client
// certificate refused) is logged with its reason, rate-limited like the
// rest, and the connection closed. Without it, a connection whose first
// bytes are a TLS handshake is told nothing and closed, with a log line.
// The fronts' sessions see the same bytes either way.
//
// Shutdown (Shutdown(), SIGTERM, SIGINT): stop accepting; requests already
// received are answered; idle connections are closed; after drain_timeout_ms
// whatever is left is closed. Run() then returns. SIGHUP never stops the
// node: it calls Options::on_reload (policies) and is logged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "node/common/clock.h"
#include "node/common/front_counters.h"
#include "node/common/status.h"
#include "node/engine/limiter.h"
#include "node/net/stream_front.h"
#include "node/policy/policy_store.h"
#include "node/server/request_handler.h"
#include "protocol/codec.h"
#include "protocol/messages.h"

namespace tally {

class TlsContext;

class Server {
 public:
  struct Options {
    std::string address = "127.0.0.1";
    uint16_t port = 7420;  // 0: an ephemeral port, see port()
    int threads = 2;
    size_t max_connections = 10'000;  // on each port
    protocol::FrameLimits limits;
    int64_t idle_timeout_ms = 60'000;
    int64_t frame_timeout_ms = 10'000;  // from a frame's first byte to its last
    int64_t write_timeout_ms = 10'000;
    // Receive buffers of all connections together, beyond 16 KiB each.
    size_t max_buffer_bytes = size_t{128} << 20;
    int64_t drain_timeout_ms = 5'000;
    int64_t sweep_interval_ms = 10'000;  // Limiter::SweepExpired period; 0: never
    bool handle_signals = true;          // SIGTERM and SIGINT start a shutdown; SIGHUP reloads
    // Checks by policy are decided under these; null: no policies (every
    // domain unknown). Not owned; must outlive the Server.
    PolicyStore* policies = nullptr;
    // What SIGHUP does (reload what is reloadable); called on worker 0.
    // Empty: SIGHUP is logged and otherwise ignored. It never stops the node.
    std::function<void()> on_reload;
    // Called on worker 0 when a shutdown begins, before the drain (to stop
    // reporting ready). May be empty.
    std::function<void()> on_shutdown;
    // TLS on every port (node/tls/tls_context.h, ForClientPorts); null:
    // plain text. Not owned; must outlive the Server.
    const TlsContext* tls = nullptr;
    // Fills the stats the server does not own (persistence); may be empty.
    // Called on a worker thread for each stats request.
    std::function<void(protocol::StatsReply*)> add_stats;
    // Forgets a member gone for good (Gossip::ForgetMember); empty: the
    // node does not gossip, and such requests are unsupported.
    RequestHandler::ForgetMember forget_member;
  };

  // limiter and clock must outlive the Server.
  Server(const Options& options, Limiter* limiter, const Clock* clock);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves `front` on address:port (0: an ephemeral port) too; `name`
  // names the port in the log and in errors, e.g. "the HTTP port". Call
  // before Listen(). front must outlive the Server.
  void AddFront(const std::string& name, const std::string& address, uint16_t port,
                StreamFront* front);

  // Binds the port of the front added as `name` and serves it at once: the
  // workers start now, before Listen() and Run(), so that the port answers
  // while the node is still restoring or recovering (health endpoints).
  // Other ports wait for Run(). Before Listen(); once per front. A Server
  // that never runs stops its workers when destroyed.
  Status ServeEarly(const std::string& name);

  // Binds and listens on every port not served early. After OK, port() is
  // the client port's bound port and front_port(name) that of the front
  // added as `name`, and (Options::handle_signals) SIGTERM, SIGINT and
  // SIGHUP are held for Run() instead of their default action.
  Status Listen();
  uint16_t port() const;
  uint16_t front_port(const std::string& name) const;

  // Serves every port until shut down and drained. Call once, after Listen().
  void Run();
  // Starts a graceful shutdown. Thread-safe; returns at once.
  void Shutdown();

  // Thread-safe.
  protocol::StatsReply Stats() const;
  // What tally's protocol front has decided (for metrics); thread-safe.
  const FrontCounters& protocol_counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally
