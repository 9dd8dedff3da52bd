// One cpp-httplib server bound to "host:port" and serving on a thread of its own: what the
// metrics endpoint (frontends/http/metrics_http.h) and the REST front end
// (server/frontends/rest/rest_server.h) share. They differ in routes, timeouts and pool size
// (set by the `make` callback) and in the names their errors use (Spec).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "mha/status.h"

namespace httplib {
class Server;
}

namespace mha::serve {

class HttpEndpoint {
 public:
  struct Spec {
    std::string flag;  // names a malformed address: "<flag> '<address>': expected host:port"
    std::string what;  // "cannot listen for <what> on <address>"; "<what> endpoint ... stopped"
    // TCP_NODELAY on the accepted sockets and a listen backlog of SOMAXCONN (many clients
    // connecting at once). SO_REUSEADDR is always set, SO_REUSEPORT never.
    bool low_latency = false;
  };
  // Makes the server with its routes and settings; an error is returned by Start as it is.
  using Make = std::function<StatusOr<std::unique_ptr<httplib::Server>>()>;

  HttpEndpoint() = default;
  ~HttpEndpoint();  // Stop()
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Parses `address` ("[::]:port" for IPv6; port 0 picks a free one), makes the server, binds
  // it and serves; returns once the accept loop runs. INVALID_ARGUMENT for a malformed address,
  // UNAVAILABLE when it cannot be bound.
  Status Start(const std::string& address, const Spec& spec, const Make& make);
  int port() const { return port_; }
  // Stops accepting, finishes the requests being answered, joins the thread. Idempotent.
  void Stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// "host:port" -> host and port ("[::1]:80" -> "::1", 80). False when malformed.
bool SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace mha::serve
