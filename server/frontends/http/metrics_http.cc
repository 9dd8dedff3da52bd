#include "server/frontends/http/metrics_http.h"

#include <httplib.h>

#include <exception>
#include <memory>
#include <utility>

namespace mha::serve {
namespace {

constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";
// Prometheus keeps one connection, probes open one each. Enough threads that 64 clients holding
// half-sent requests (each holds a thread until its read times out) leave probes some, and short
// timeouts so that such a client lets go of its thread soon.
constexpr int kHttpThreads = 96;
constexpr int kReadTimeoutS = 2;
constexpr int kWriteTimeoutS = 5;
constexpr int kKeepAliveTimeoutS = 5;

}  // namespace

MetricsHttpServer::MetricsHttpServer(const Metrics* metrics, std::function<bool()> ready)
    : metrics_(metrics), ready_(std::move(ready)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Status MetricsHttpServer::Start(const std::string& address) {
  return endpoint_.Start(address, {"--metrics-address", "metrics"}, [this] {
    auto server = std::make_unique<httplib::Server>();
    server->new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
    server->set_read_timeout(kReadTimeoutS, 0);
    server->set_write_timeout(kWriteTimeoutS, 0);
    server->set_keep_alive_timeout(kKeepAliveTimeoutS);
    server->set_keep_alive_max_count(1000);
    server->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      try {
        res.set_content(metrics_->Serialize(), kTextFormat);
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(std::string("metrics: ") + e.what() + "\n", "text/plain");
      }
    });
    server->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      const bool ready = ready_ && ready_();
      res.status = ready ? 200 : 503;
      res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
    });
    return StatusOr<std::unique_ptr<httplib::Server>>(std::move(server));
  });
}

}  // namespace mha::serve
