#include "server/frontends/common/request_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include "mha/text.h"
#include "server/frontends/common/trace_context.h"

namespace mha::serve {
namespace {

std::string GenerateRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

RequestLog NewRequestLog(const char* method, std::string_view client_id, std::string peer,
                         std::string_view traceparent) {
  RequestLog log;
  log.method = method;
  log.start = Clock::now();
  log.peer = std::move(peer);
  if (!client_id.empty()) {
    log.request_id.assign(client_id.data(), std::min<size_t>(client_id.length(), 128));
  } else {
    log.request_id = GenerateRequestId();
  }
  // W3C trace context: a valid traceparent's trace id is logged; the adapter echoes the value.
  if (traceparent.length() <= kMaxTraceParentBytes) {
    log.trace_id = TraceIdOf(traceparent);
    if (!log.trace_id.empty()) log.traceparent.assign(traceparent.data(), traceparent.length());
  }
  return log;
}

std::string InferDetail(const std::string& model, int64_t queue_us, int64_t compute_us) {
  return "model=" + model + " queue_us=" + std::to_string(queue_us) +
         " compute_us=" + std::to_string(compute_us);
}

Status CheckSessionHeader(std::string_view header, const std::string& body_id) {
  if (header == body_id) return Status::Ok();
  return InvalidArgument("x-session-id: the header names session '" + Abbreviate(header) +
                         "' but session_id is '" + Abbreviate(body_id) +
                         "' (they must agree: a proxy routes by the header)");
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

void LogCancelled(const RequestLog& log, int64_t answered, int64_t in_flight) {
  spdlog::info("{} cancelled request_id={} peer={} answers={} in_flight={} (dropped)", log.method,
               log.request_id, log.peer, answered, in_flight);
}

Clock::time_point SteadyDeadline(std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto remaining = deadline - std::chrono::system_clock::now();
  if (remaining > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(remaining);
}

}  // namespace mha::serve
