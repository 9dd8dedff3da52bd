// The metrics/health HTTP endpoint of mha-server, on its own port (--metrics-address):
//   GET /metrics   Prometheus text exposition (Metrics::Serialize, read at scrape time)
//   GET /healthz   200 "ok" while the process is up
//   GET /readyz    200 when models are loaded and the server is SERVING, 503 otherwise
// cpp-httplib, not prometheus-cpp's Exposer: Debian's civetweb starts its threads with a fixed
// 100 KB stack, and a process that links Torch needs ~106 KB of static TLS per thread, so the
// Exposer's threads fail to start ("Possible problem binding to port"). httplib's threads are
// plain std::threads with the default stack.
#pragma once

#include <functional>
#include <string>

#include "mha/status.h"
#include "server/frontends/http/http_endpoint.h"
#include "server/serving/observability/metrics.h"

namespace mha::serve {

class MetricsHttpServer {
 public:
  // `ready` answers /readyz; it must be cheap and thread-safe. `metrics` must outlive Stop().
  MetricsHttpServer(const Metrics* metrics, std::function<bool()> ready);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds "host:port" ("[::]:port" for IPv6; port 0 picks a free one) and serves on a thread of
  // its own. UNAVAILABLE when the address cannot be bound.
  Status Start(const std::string& address);
  int port() const { return endpoint_.port(); }
  // Stops serving and joins the thread. Idempotent.
  void Stop() { endpoint_.Stop(); }

 private:
  const Metrics* const metrics_;
  const std::function<bool()> ready_;
  HttpEndpoint endpoint_;  // last: stopped before the members its handlers read
};

}  // namespace mha::serve
