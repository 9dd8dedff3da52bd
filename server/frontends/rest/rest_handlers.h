// The REST front end's handlers (private to server/frontends/rest): rest_handlers.cc answers
// health, metadata, config and statistics; rest_infer.cc answers inference.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/frontends/common/request_log.h"
#include "server/frontends/rest/rest_server.h"

namespace mha::serve::rest {

struct RestContext {
  InferenceServer* core;
  const RestFrontendOptions* options;
};

// The request id (X-Request-Id header, else generated) and the W3C traceparent, both echoed in
// the response headers; the peer and the start time, for the log line.
RequestLog BeginRequest(const httplib::Request& req, httplib::Response& res, const char* method);

// A JSON answer (200) or, for an error, {"error": ...} with its HTTP status; one log line.
void Reply(httplib::Response& res, const RequestLog& log, const Status& status,
           const nlohmann::json& body = nullptr);

// {m} and {v} of a /v2/models/{m}[/versions/{v}]... route.
std::string ModelOf(const httplib::Request& req);
std::string VersionOf(const httplib::Request& req);

void HandleServerLive(const RestContext& c, const httplib::Request& req, httplib::Response& res);
void HandleServerReady(const RestContext& c, const httplib::Request& req, httplib::Response& res);
void HandleServerMetadata(const RestContext& c, const httplib::Request& req,
                          httplib::Response& res);
void HandleModelMetadata(const RestContext& c, const httplib::Request& req, httplib::Response& res);
void HandleModelReady(const RestContext& c, const httplib::Request& req, httplib::Response& res);
void HandleModelConfig(const RestContext& c, const httplib::Request& req, httplib::Response& res);
// `all`: GET /v2/models/stats (no model in the path).
void HandleModelStats(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                      bool all);
void HandleInfer(const RestContext& c, const httplib::Request& req, httplib::Response& res);
// The admin token (`Authorization: Bearer <token>` header) of the control endpoints.
Status Authorize(const RestContext& c, const httplib::Request& req);
// A control request's body: empty ({}), or a JSON object of at most 64 KiB.
StatusOr<nlohmann::json> SmallBody(const httplib::Request& req);
// rest_repository.cc: Triton's repository extension (admin token as gRPC's).
void HandleRepositoryIndex(const RestContext& c, const httplib::Request& req,
                           httplib::Response& res);
void HandleRepositoryControl(const RestContext& c, const httplib::Request& req,
                             httplib::Response& res, bool load);
// rest_shm.cc: Triton's shared-memory extension; `cuda`: the /v2/cudasharedmemory endpoints.
void HandleShmStatus(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                     bool cuda);
void HandleShmRegister(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                       bool cuda);
void HandleShmUnregister(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                         bool cuda);

}  // namespace mha::serve::rest
