// Per-call bookkeeping for logs, protocol-neutral (gRPC's adapters are in grpc_call.h): the
// request id (the client's "x-request-id" or a generated one, echoed to it), the peer, the method
// and the start time, the W3C trace context (a valid "traceparent": its trace id is logged, the
// value echoed); one log line per call; the x-session-id header check.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mha/status.h"
#include "server/serving/clock.h"

namespace mha::serve {

inline constexpr char kRequestIdKey[] = "x-request-id";
// The header a proxy hashes to pin a decoding session to one replica (docs/scale-out.md).
inline constexpr char kSessionIdKey[] = "x-session-id";
// W3C trace context (trace_context.h); a longer value is ignored.
inline constexpr char kTraceParentKey[] = "traceparent";
inline constexpr size_t kMaxTraceParentBytes = 256;

struct RequestLog {
  std::string method;
  std::string request_id;
  std::string peer;
  Clock::time_point start;
  std::string trace_id;     // a valid traceparent's trace id; "" = none sent or malformed
  std::string traceparent;  // that traceparent, to echo; "" when trace_id is ""
};

// Starts a call's record now: `client_id` is the client's x-request-id (at most 128 bytes are
// kept), or "" for a generated id; `traceparent` the client's traceparent ("" = none), kept only
// when valid (TraceIdOf): the front end echoes log.traceparent when it is not "".
RequestLog NewRequestLog(const char* method, std::string_view client_id, std::string peer,
                         std::string_view traceparent = {});

// One warning line per failed call (code, message, request id, peer); a debug line per success.
void LogOutcome(const RequestLog& log, const Status& status, const std::string& detail = "");

// One info line when a stream's call is cancelled (the client cancelled, or its deadline passed on
// the server) with `in_flight` passes still running: their answers are dropped, not written.
void LogCancelled(const RequestLog& log, int64_t answered, int64_t in_flight);

// The detail of an inference call's success line: "model=M queue_us=Q compute_us=C".
std::string InferDetail(const std::string& model, int64_t queue_us, int64_t compute_us);

// One x-session-id value must name the session the message names (`body_id`; "" when the
// message names none): a proxy routes by the header, the server by the body, so a disagreement
// would reach the wrong replica's cache. INVALID_ARGUMENT naming both.
Status CheckSessionHeader(std::string_view header, const std::string& body_id);

// A wall-clock deadline on the steady clock (time_point::max() for none or one over a year away).
Clock::time_point SteadyDeadline(std::chrono::system_clock::time_point deadline);

}  // namespace mha::serve
