#include "node/http/admin_front.h"

namespace tally {
namespace {

constexpr char kText[] = "text/plain; charset=utf-8";

// One connection's admin requests; owned by its worker's thread.
class AdminHandler : public HttpHandler {
 public:
  AdminHandler(const Readiness* readiness, const AdminFront::Metrics* metrics)
      : readiness_(readiness), metrics_(metrics) {}

  void Handle(const HttpRequest& request, HttpResponse* response) override {
    response->content_type = kText;
    const bool known =
        request.path == "/healthz" || request.path == "/readyz" || request.path == "/metrics";
    if (!known) return Text(404, "not found (try /healthz, /readyz, /metrics)\n", response);
    if (request.method != "GET") {
      response->AddHeader("Allow", "GET, HEAD");
      return Text(405, "this endpoint takes GET or HEAD\n", response);
    }
    if (request.path == "/healthz") return Text(200, "ok\n", response);
    if (request.path == "/readyz") {
      if (readiness_->ready()) return Text(200, "ready\n", response);
      return Text(503, "not ready: " + readiness_->waiting_for() + "\n", response);
    }
    if (!*metrics_) return Text(404, "metrics not built in\n", response);
    response->content_type = "text/plain; version=0.0.4; charset=utf-8";
    response->body = (*metrics_)();
  }

 private:
  static void Text(int status, std::string body, HttpResponse* response) {
    response->status = status;
    response->body = std::move(body);
  }

  const Readiness* const readiness_;
  const AdminFront::Metrics* const metrics_;
};

}  // namespace

std::unique_ptr<HttpHandler> AdminFront::NewHandler(const SessionContext&) {
  return std::make_unique<AdminHandler>(readiness_, &metrics_);
}

}  // namespace tally
