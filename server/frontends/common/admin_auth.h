// The admin token of the model control calls (mha.v1.ModelControlService and the Open Inference
// Protocol's repository extension): with a token set, a call needs "authorization: Bearer <token>"
// metadata (an HTTP header elsewhere) — UNAUTHENTICATED without it, PERMISSION_DENIED with another
// token.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mha/status.h"

namespace mha::serve {

// OK when `token` is "" (no token needed) or `authorization` (the call's authorization header,
// nullopt when it has none) is "Bearer <token>" (compared in constant time). Protocol-neutral:
// gRPC's adapter is in grpc_call.h.
Status AuthorizeAdmin(std::optional<std::string_view> authorization, const std::string& token);

// Reads the admin token: the file's first line, surrounding whitespace removed. Errors name the
// file: unreadable, or empty.
StatusOr<std::string> ReadAdminToken(const std::string& path);

}  // namespace mha::serve
