// The KServe v2 HTTP/REST front end (Open Inference Protocol over HTTP, with Triton's
// binary_tensor_data, model_configuration and statistics extensions) on its own port
// (--http-address, default 0.0.0.0:8501). It translates like the gRPC OIP front end and shares
// its code: a request body becomes an inference::ModelInferRequest (infer_body.h) that
// oip::DecodeModelInferRequest decodes, the same ServerCore::Infer answers it, and metadata,
// config and statistics are the OIP protos written as JSON (proto_json.h). Errors are
// {"error": "<the gRPC message>"} with the HTTP status of http_status.h.
//
//   GET  /v2/health/live, /v2/health/ready, /v2
//   GET  /v2/models/stats                                     every READY model's statistics
//   GET  /v2/models/{m}[/versions/{v}]                        metadata
//   GET  /v2/models/{m}[/versions/{v}]/ready | /config | /stats
//   POST /v2/models/{m}[/versions/{v}]/infer
//   POST /v2/repository/index, /v2/repository/models/{m}/load | /unload   (admin token)
//
// Sequences (Triton's sequence extension: sequence_id/_start/_end) are decoding sessions, as on
// gRPC (oip/sequence.h).
//
// cpp-httplib (Debian's libcpp-httplib-dev, as the metrics endpoint): a thread per connection
// from a fixed pool, so slow clients are bounded by the read timeout and the pool's size. Bodies
// above --max-message-bytes are refused (413) before they are read, compressed ones (415) too;
// keep-alive is on.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "mha/status.h"
#include "server/frontends/common/kserve_options.h"
#include "server/frontends/http/http_endpoint.h"
#include "server/frontends/oip/model_metadata.h"
#include "server/serving/inference_server.h"
#include "server/serving/model_controller.h"
#include "server/serving/observability/metrics.h"

namespace mha::serve::rest {

struct RestFrontendOptions : KServeOptions {
  // Connections served at once (each holds a thread while open, also while it trickles in a
  // request or waits for its answer); more wait for a free thread.
  int threads = 192;
  int read_timeout_s = 5;  // one read of a request (header line or body chunk)
  // TLS (as gRPC's --tls-*-file): HTTPS when both are set; a CA makes client certificates
  // mandatory.
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
};

class RestServer {
 public:
  // `core` (and options.metrics) are not owned and must outlive Stop().
  RestServer(InferenceServer* core, RestFrontendOptions options);
  ~RestServer();  // Stop()
  RestServer(const RestServer&) = delete;
  RestServer& operator=(const RestServer&) = delete;

  // Binds "host:port" (port 0 picks one) and serves on threads of its own. UNAVAILABLE when the
  // address cannot be bound, INVALID_ARGUMENT for a malformed address or unusable TLS files.
  Status Start(const std::string& address);
  int port() const { return endpoint_.port(); }
  bool tls() const;
  // Stops accepting, finishes the requests being answered, joins the threads. Idempotent.
  void Stop();

 private:
  void Route(httplib::Server& server);

  InferenceServer* const core_;
  const RestFrontendOptions options_;
  HttpEndpoint endpoint_;  // last: stopped before the members its handlers read
};

}  // namespace mha::serve::rest
