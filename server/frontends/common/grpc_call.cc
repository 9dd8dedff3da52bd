#include "server/frontends/common/grpc_call.h"

#include <optional>
#include <string_view>

namespace mha::serve {
namespace {

std::string_view View(const grpc::string_ref& ref) { return {ref.data(), ref.length()}; }

}  // namespace

RequestLog StartRequest(grpc::ServerContextBase* context, const char* method) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(kRequestIdKey);
  auto trace = metadata.find(kTraceParentKey);
  RequestLog log =
      NewRequestLog(method, it != metadata.end() ? View(it->second) : "", context->peer(),
                    trace != metadata.end() ? View(trace->second) : "");
  context->AddInitialMetadata(kRequestIdKey, log.request_id);
  if (!log.traceparent.empty()) context->AddInitialMetadata(kTraceParentKey, log.traceparent);
  return log;
}

Status CheckSessionHeader(const grpc::ServerContextBase* context, const std::string& body_id) {
  auto [first, last] = context->client_metadata().equal_range(kSessionIdKey);
  for (auto it = first; it != last; ++it) {
    MHA_RETURN_IF_ERROR(CheckSessionHeader(View(it->second), body_id));
  }
  return Status::Ok();
}

Clock::time_point SteadyDeadline(const grpc::ServerContextBase* context) {
  return SteadyDeadline(context->deadline());
}

void StampRequest(grpc::ServerContextBase* context, const RequestLog& log,
                  InferenceRequest* request) {
  request->start = log.start;
  request->request_id = log.request_id;
  request->deadline = SteadyDeadline(context);
  request->is_cancelled = [context] { return context->IsCancelled(); };
}

Status AuthorizeAdmin(const grpc::ServerContextBase& context, const std::string& token) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  return AuthorizeAdmin(
      it == metadata.end() ? std::nullopt : std::optional<std::string_view>(View(it->second)),
      token);
}

}  // namespace mha::serve
