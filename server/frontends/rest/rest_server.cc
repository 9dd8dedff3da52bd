#include "server/frontends/rest/rest_server.h"

#include <httplib.h>

#include <cstdlib>
#include <utility>

#include "server/frontends/common/request_limits.h"
#include "server/frontends/http/http_endpoint.h"
#include "server/frontends/rest/http_status.h"
#include "server/frontends/rest/rest_handlers.h"

namespace mha::serve::rest {
namespace {

constexpr int kWriteTimeoutS = 30;  // a large answer to a slow reader
constexpr int kKeepAliveTimeoutS = 5;
constexpr int kKeepAliveMaxCount = 10000;

// /v2/models/{m}[/versions/{v}] as a regex prefix: groups 1 (model) and 2 (version, or empty).
const std::string kModel = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";

std::unique_ptr<httplib::Server> MakeServer(const RestFrontendOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    return std::make_unique<httplib::Server>();
  }
  const char* ca = o.tls_client_ca_file.empty() ? nullptr : o.tls_client_ca_file.c_str();
  return std::make_unique<httplib::SSLServer>(o.tls_cert_file.c_str(), o.tls_key_file.c_str(), ca);
}

// httplib's own refusals (unknown path 404, body over the limit 413, unreadable request 400)
// get the same {"error": ...} body as ours; ours already have one.
void FillErrorBody(const httplib::Request& req, httplib::Response& res, int64_t max_bytes) {
  if (!res.body.empty()) return;
  Status status;
  if (res.status == 404) {
    status = NotFound("no such endpoint: " + req.method + " " + req.path.substr(0, 128));
  } else if (res.status == 413) {
    // The limit's own message (request_limits.h); a body without Content-Length (chunked) was
    // cut off past the limit, so its size is not known.
    const std::string length = req.get_header_value("Content-Length");
    status = CheckMessageBytes(std::strtoull(length.c_str(), nullptr, 10), max_bytes);
    if (status.ok()) {
      status = ResourceExhausted("request body is over --max-message-bytes " +
                                 std::to_string(max_bytes));
    }
  } else if (res.status == 405) {
    status = InvalidArgument("method " + req.method + " is not allowed on " + req.path);
  } else {
    status = InvalidArgument("malformed HTTP request (status " + std::to_string(res.status) + ")");
  }
  res.set_content(ErrorBody(status), "application/json");
}

}  // namespace

RestServer::RestServer(InferenceServer* core, RestFrontendOptions options)
    : core_(core), options_(std::move(options)) {}

RestServer::~RestServer() { Stop(); }

bool RestServer::tls() const {
  return !options_.tls_cert_file.empty() || !options_.tls_key_file.empty();
}

Status RestServer::Start(const std::string& address) {
  const HttpEndpoint::Spec spec{"--http-address", "HTTP/REST", /*low_latency=*/true};
  return endpoint_.Start(address, spec, [this]() -> StatusOr<std::unique_ptr<httplib::Server>> {
    auto server = MakeServer(options_);
    if (!server->is_valid()) {
      return InvalidArgument(
          "--http-address: the TLS certificate, key or client CA cannot be used");
    }
    const int threads = options_.threads;
    server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server->set_read_timeout(options_.read_timeout_s, 0);
    server->set_write_timeout(kWriteTimeoutS, 0);
    server->set_keep_alive_timeout(kKeepAliveTimeoutS);
    server->set_keep_alive_max_count(kKeepAliveMaxCount);
    server->set_payload_max_length(static_cast<size_t>(options_.max_message_bytes));
    Route(*server);
    return StatusOr<std::unique_ptr<httplib::Server>>(std::move(server));
  });
}

void RestServer::Route(httplib::Server& s) {
  const RestContext c{core_, &options_};
  s.Get("/v2/health/live", [c](const auto& req, auto& res) { HandleServerLive(c, req, res); });
  s.Get("/v2/health/ready", [c](const auto& req, auto& res) { HandleServerReady(c, req, res); });
  s.Get("/v2", [c](const auto& req, auto& res) { HandleServerMetadata(c, req, res); });
  // Before the model routes: "stats" would match a model name.
  s.Get("/v2/models/stats",
        [c](const auto& req, auto& res) { HandleModelStats(c, req, res, /*all=*/true); });
  s.Get(kModel, [c](const auto& req, auto& res) { HandleModelMetadata(c, req, res); });
  s.Get(kModel + "/ready", [c](const auto& req, auto& res) { HandleModelReady(c, req, res); });
  s.Get(kModel + "/config", [c](const auto& req, auto& res) { HandleModelConfig(c, req, res); });
  s.Get(kModel + "/stats",
        [c](const auto& req, auto& res) { HandleModelStats(c, req, res, /*all=*/false); });
  s.Post(kModel + "/infer", [c](const auto& req, auto& res) { HandleInfer(c, req, res); });
  s.Post("/v2/repository/index",
         [c](const auto& req, auto& res) { HandleRepositoryIndex(c, req, res); });
  s.Post("/v2/repository/models/([^/]+)/load",
         [c](const auto& req, auto& res) { HandleRepositoryControl(c, req, res, /*load=*/true); });
  s.Post("/v2/repository/models/([^/]+)/unload",
         [c](const auto& req, auto& res) { HandleRepositoryControl(c, req, res, /*load=*/false); });
  for (const bool cuda : {false, true}) {  // Triton's shared-memory extension (rest_shm.cc)
    const std::string base = cuda ? "/v2/cudasharedmemory" : "/v2/systemsharedmemory";
    const std::string region = base + "/region/([^/]+)";
    for (const std::string& prefix : {base, region}) {
      s.Get(prefix + "/status",
            [c, cuda](const auto& req, auto& res) { HandleShmStatus(c, req, res, cuda); });
      s.Post(prefix + "/unregister",
             [c, cuda](const auto& req, auto& res) { HandleShmUnregister(c, req, res, cuda); });
    }
    s.Post(region + "/register",
           [c, cuda](const auto& req, auto& res) { HandleShmRegister(c, req, res, cuda); });
  }
  // httplib inflates gzip/deflate/brotli bodies as it reads them, unbounded by the payload limit
  // (which counts the bytes on the wire): a compressed body is refused before it is read.
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    const std::string encoding = req.get_header_value("Content-Encoding");
    if (encoding.empty() || encoding == "identity") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 415;
    res.set_header("Connection", "close");  // the unread body must not be taken for a request
    res.set_content(ErrorBody(InvalidArgument("Content-Encoding '" + encoding.substr(0, 32) +
                                              "' is not accepted: send the body uncompressed")),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  const int64_t max_bytes = options_.max_message_bytes;
  s.set_error_handler(
      httplib::Server::Handler([max_bytes](const httplib::Request& req, httplib::Response& res) {
        FillErrorBody(req, res, max_bytes);
      }));
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(ErrorBody(Internal("REST handler failed: " + what)), "application/json");
      });
}

void RestServer::Stop() { endpoint_.Stop(); }

}  // namespace mha::serve::rest
