#include "server/serving/observability/metrics_http.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <exception>
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

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 >= address.size()) return false;
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return false;
  const std::string digits = address.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(digits.c_str(), &end, 10);
  if (end == digits.c_str() || *end != '\0' || p < 0 || p > 65535) return false;
  *host = h;
  *port = static_cast<int>(p);
  return true;
}

MetricsHttpServer::MetricsHttpServer(const Metrics* metrics, std::function<bool()> ready)
    : metrics_(metrics), ready_(std::move(ready)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Status MetricsHttpServer::Start(const std::string& address) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, &host, &port)) {
    return InvalidArgument("--metrics-address '" + address + "': expected host:port");
  }
  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  server_->set_read_timeout(kReadTimeoutS, 0);
  server_->set_write_timeout(kWriteTimeoutS, 0);
  server_->set_keep_alive_timeout(kKeepAliveTimeoutS);
  server_->set_keep_alive_max_count(1000);
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port
  // silently; SO_REUSEADDR alone (restart while old connections linger) is what we want.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(metrics_->Serialize(), kTextFormat);
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("metrics: ") + e.what() + "\n", "text/plain");
    }
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = ready_ && ready_();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
  });
  if (port == 0) {
    port = server_->bind_to_any_port(host);
    if (port <= 0) port = 0;
  } else if (!server_->bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    server_.reset();
    return Unavailable("cannot listen for metrics on " + address);
  }
  port_ = port;
  thread_ = std::thread([server = server_.get(), address] {
    if (!server->listen_after_bind()) spdlog::error("metrics endpoint on {} stopped", address);
  });
  // stop() is a no-op until the accept loop runs; wait for it so that Stop() never hangs.
  for (int i = 0; i < 2000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

void MetricsHttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace mha::serve
