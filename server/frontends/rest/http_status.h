// The one place where an mha::Status becomes an HTTP answer of the REST front end (the
// counterpart of proto/wire/status_convert for gRPC): the status code the KServe v2 REST
// specification implies, and the body {"error": "<the gRPC message>"}.
//
//   OK 200, INVALID_ARGUMENT / OUT_OF_RANGE / FAILED_PRECONDITION 400, UNAUTHENTICATED 401,
//   PERMISSION_DENIED 403, NOT_FOUND 404, ALREADY_EXISTS / ABORTED 409,
//   RESOURCE_EXHAUSTED 429 when it is a full queue or KV cache (retry later), else 413 (the
//   request is too large: message, batch, sequence, response or working-memory limits),
//   CANCELLED 499, UNIMPLEMENTED 501, UNAVAILABLE 503 (loading, not ready, shutting down),
//   DEADLINE_EXCEEDED 504, anything else 500.
#pragma once

#include <string>

#include "mha/status.h"

namespace mha::serve::rest {

int HttpStatusOf(const Status& status);

// {"error": "<message>"} (the message exactly as gRPC sends it).
std::string ErrorBody(const Status& status);

}  // namespace mha::serve::rest
