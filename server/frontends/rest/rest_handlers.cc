#include "server/frontends/rest/rest_handlers.h"

#include <algorithm>
#include <string>

#include "mha/device_memory.h"
#include "server/frontends/oip/inference_service.h"
#include "server/frontends/oip/model_statistics.h"
#include "server/frontends/rest/http_status.h"
#include "server/frontends/rest/proto_json.h"

namespace mha::serve::rest {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kRequestIdHeader[] = "X-Request-Id";

}  // namespace

RequestLog BeginRequest(const httplib::Request& req, httplib::Response& res, const char* method) {
  RequestLog log = NewRequestLog(method, req.get_header_value(kRequestIdHeader),
                                 "http:" + req.remote_addr + ":" + std::to_string(req.remote_port),
                                 req.get_header_value(kTraceParentKey));
  res.set_header(kRequestIdHeader, log.request_id);
  if (!log.traceparent.empty()) res.set_header(kTraceParentKey, log.traceparent);
  return log;
}

void Reply(httplib::Response& res, const RequestLog& log, const Status& status,
           const nlohmann::json& body) {
  LogOutcome(log, status);
  res.status = HttpStatusOf(status);
  res.set_content(status.ok() ? DumpJson(body) : ErrorBody(status), kJson);
}

std::string ModelOf(const httplib::Request& req) {
  return req.matches.size() > 1 ? req.matches[1].str() : "";
}

std::string VersionOf(const httplib::Request& req) {
  return req.matches.size() > 2 ? req.matches[2].str() : "";
}

void HandleServerLive(const RestContext&, const httplib::Request& req, httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest ServerLive");
  Reply(res, log, Status::Ok(), {{"live", true}});  // answering at all is being live
}

void HandleServerReady(const RestContext& c, const httplib::Request& req, httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest ServerReady");
  const bool ready =
      c.options->server_ready ? c.options->server_ready() : c.core->repository()->Ready();
  Reply(res, log, Status::Ok(), {{"ready", ready}});
  if (!ready) res.status = 503;
}

void HandleServerMetadata(const RestContext& c, const httplib::Request& req,
                          httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest ServerMetadata");
  inference::ServerMetadataResponse metadata;
  metadata.set_name(oip::kServerName);
  metadata.set_version(c.options->server_version.empty() ? CurrentBuildInfo().version
                                                         : c.options->server_version);
  metadata.add_extensions("model_configuration");
  metadata.add_extensions("statistics");
  metadata.add_extensions("sequence");
  metadata.add_extensions("system_shared_memory");  // rest_shm.cc
  if (CudaShmBuilt()) metadata.add_extensions("cuda_shared_memory");
  metadata.add_extensions("binary_tensor_data");
  Reply(res, log, Status::Ok(), ProtoToJson(metadata));
}

void HandleModelMetadata(const RestContext& c, const httplib::Request& req,
                         httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest ModelMetadata");
  auto entry = oip::ResolveVersion(*c.core->repository(), ModelOf(req), VersionOf(req));
  if (!entry.ok()) return Reply(res, log, entry.status());
  inference::ModelMetadataResponse metadata;
  oip::FillModelMetadata(*entry.value(), &metadata);
  Reply(res, log, Status::Ok(), ProtoToJson(metadata));
}

// 200 {"name", "ready": true}; a model that does not resolve READY answers with the reason's
// status (404 unknown, 503 loading or unloading, 400 failed to load) and its message.
void HandleModelReady(const RestContext& c, const httplib::Request& req, httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest ModelReady");
  auto entry = oip::ResolveVersion(*c.core->repository(), ModelOf(req), VersionOf(req));
  if (!entry.ok()) return Reply(res, log, entry.status());
  Reply(res, log, Status::Ok(), {{"name", entry.value()->name}, {"ready", true}});
}

// Triton's REST answer is the ModelConfig itself (gRPC wraps it in {"config": ...}).
void HandleModelConfig(const RestContext& c, const httplib::Request& req, httplib::Response& res) {
  const RequestLog log = BeginRequest(req, res, "rest ModelConfig");
  auto entry = oip::ResolveVersion(*c.core->repository(), ModelOf(req), VersionOf(req));
  if (!entry.ok()) return Reply(res, log, entry.status());
  inference::ModelConfig config;
  const ModelEntry& e = *entry.value();
  oip::FillModelConfig(e, c.core->Scheduling(e.name, e.version), &config);
  Reply(res, log, Status::Ok(), ProtoToJson(config));
}

void HandleModelStats(const RestContext& c, const httplib::Request& req, httplib::Response& res,
                      bool all) {
  const RequestLog log = BeginRequest(req, res, "rest ModelStatistics");
  inference::ModelStatisticsResponse stats;
  const Status status = oip::FillStatisticsResponse(*c.core, all ? "" : ModelOf(req),
                                                    all ? "" : VersionOf(req), &stats);
  Reply(res, log, status, status.ok() ? ProtoToJson(stats) : nullptr);
}

}  // namespace mha::serve::rest
