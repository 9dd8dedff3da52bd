// Per-call bookkeeping for logs: the request id (client's "x-request-id" metadata or a generated
// one, echoed in the initial metadata), the peer, the method and the start time.
#pragma once

#include <grpcpp/server_context.h>

#include <string>

#include "mha/status.h"
#include "server/serving/clock.h"

namespace mha::serve {

inline constexpr char kRequestIdKey[] = "x-request-id";
// The header a proxy hashes to pin a decoding session to one replica (docs/scale-out.md).
inline constexpr char kSessionIdKey[] = "x-session-id";

struct RequestLog {
  std::string method;
  std::string request_id;
  std::string peer;
  Clock::time_point start;
  std::string trace_id;  // a W3C traceparent's trace id (trace_context.h); "" = none sent
};

// A fresh request id: 16 hex digits.
std::string GenerateRequestId();

// Reads or generates the request id and adds it to the call's initial metadata (call before the
// first write or Finish).
RequestLog StartRequest(grpc::CallbackServerContext* context, const char* method);

// One warning line per failed call (code, message, request id, peer); a debug line per success.
void LogOutcome(const RequestLog& log, const Status& status, const std::string& detail = "");

// x-session-id, when the call carries it, must name the session the message names (`body_id`;
// "" when the message names none): a proxy routes by the header, the server by the body, so a
// disagreement would reach the wrong replica's cache. INVALID_ARGUMENT naming both.
Status CheckSessionHeader(const grpc::CallbackServerContext* context, const std::string& body_id);

// The call's deadline on the steady clock (time_point::max() when it has none).
Clock::time_point SteadyDeadline(const grpc::CallbackServerContext* context);

}  // namespace mha::serve
