#include "server/frontends/grpc_v1/request_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "mha/text.h"
#include "server/frontends/trace_context.h"

namespace mha::serve {

std::string GenerateRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

RequestLog StartRequest(grpc::CallbackServerContext* context, const char* method) {
  RequestLog log;
  log.method = method;
  log.start = Clock::now();
  log.peer = context->peer();
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(kRequestIdKey);
  if (it != metadata.end() && it->second.length() > 0) {
    log.request_id.assign(it->second.data(), std::min<size_t>(it->second.length(), 128));
  } else {
    log.request_id = GenerateRequestId();
  }
  context->AddInitialMetadata(kRequestIdKey, log.request_id);
  // W3C trace context: a valid traceparent is logged (its trace id) and echoed back unchanged.
  it = metadata.find(kTraceParentKey);
  if (it != metadata.end()) {
    const std::string traceparent(it->second.data(), std::min<size_t>(it->second.length(), 256));
    log.trace_id = TraceIdOf(traceparent);
    if (!log.trace_id.empty()) context->AddInitialMetadata(kTraceParentKey, traceparent);
  }
  return log;
}

Status CheckSessionHeader(const grpc::CallbackServerContext* context, const std::string& body_id) {
  const auto& metadata = context->client_metadata();
  auto [first, last] = metadata.equal_range(kSessionIdKey);
  for (auto it = first; it != last; ++it) {
    const std::string header(it->second.data(), it->second.length());
    if (header == body_id) continue;
    return InvalidArgument("x-session-id: the header names session '" + Abbreviate(header) +
                           "' but session_id is '" + Abbreviate(body_id) +
                           "' (they must agree: a proxy routes by the header)");
  }
  return Status::Ok();
}

void LogOutcome(const RequestLog& log, const Status& status, const std::string& detail) {
  const int64_t us = MicrosBetween(log.start, Clock::now());
  const std::string trace = log.trace_id.empty() ? "" : " trace_id=" + log.trace_id;
  if (status.ok()) {
    spdlog::debug("{} ok request_id={}{} peer={} latency_us={}{}{}", log.method, log.request_id,
                  trace, log.peer, us, detail.empty() ? "" : " ", detail);
    return;
  }
  spdlog::warn("{} failed code={} request_id={}{} peer={} latency_us={} message=\"{}\"", log.method,
               StatusCodeName(status.code()), log.request_id, trace, log.peer, us,
               status.message());
}

Clock::time_point SteadyDeadline(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto remaining = deadline - std::chrono::system_clock::now();
  if (remaining > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(remaining);
}

}  // namespace mha::serve
