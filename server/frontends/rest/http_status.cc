#include "server/frontends/rest/http_status.h"

#include <nlohmann/json.hpp>

namespace mha::serve::rest {
namespace {

bool StartsWith(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// A refusal that goes away by itself (scheduling/runner.h QueueFull, the sessions' KV cache
// pool): 429 Too Many Requests. Every other RESOURCE_EXHAUSTED is a request over a size limit.
bool IsRetryable(const Status& status) {
  return StartsWith(status.message(), "queue full") ||
         StartsWith(status.message(), "KV cache full");
}

}  // namespace

int HttpStatusOf(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return IsRetryable(status) ? 429 : 413;
    case StatusCode::kCancelled:
      return 499;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorBody(const Status& status) {
  nlohmann::json body = {{"error", status.message()}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mha::serve::rest
