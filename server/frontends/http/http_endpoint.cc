#include "server/frontends/http/http_endpoint.h"

#include <httplib.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>

namespace mha::serve {

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

HttpEndpoint::~HttpEndpoint() { Stop(); }

Status HttpEndpoint::Start(const std::string& address, const Spec& spec, const Make& make) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, &host, &port)) {
    return InvalidArgument(spec.flag + " '" + address + "': expected host:port");
  }
  auto made = make();
  if (!made.ok()) return made.status();
  server_ = std::move(made.value());
  int listen_fd = -1;
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port
  // silently; SO_REUSEADDR alone (restart while old connections linger) is what we want.
  const bool nodelay = spec.low_latency;
  server_->set_socket_options([&listen_fd, nodelay](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (nodelay) setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));  // inherited
    listen_fd = sock;
  });
  if (port == 0) {
    port = server_->bind_to_any_port(host);
    if (port <= 0) port = 0;
  } else if (!server_->bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    server_.reset();
    return Unavailable("cannot listen for " + spec.what + " on " + address);
  }
  port_ = port;
  // Debian's libcpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG is
  // compiled into the library): 100 clients connecting at once overflow it and their SYNs are
  // retried after 1 s. Listening again on the bound socket raises the backlog (Linux).
  if (spec.low_latency && listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  thread_ = std::thread([server = server_.get(), address, what = spec.what] {
    if (!server->listen_after_bind()) spdlog::error("{} endpoint on {} stopped", what, address);
  });
  // stop() is a no-op until the accept loop runs; wait for it so that Stop() never hangs.
  for (int i = 0; i < 2000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

void HttpEndpoint::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace mha::serve
