// The admin token of the model control calls (mha.v1.ModelControlService and the Open Inference
// Protocol's repository extension): with a token set, a call needs "authorization: Bearer <token>"
// metadata — UNAUTHENTICATED without it, PERMISSION_DENIED with another token.
#pragma once

#include <grpcpp/server_context.h>

#include <string>

#include "mha/status.h"

namespace mha::serve {

// OK when `token` is "" (no token needed) or the call carries it (compared in constant time).
Status AuthorizeAdmin(const grpc::CallbackServerContext& context, const std::string& token);
// The same check of an authorization value ("Bearer <token>"; null = none sent), for the HTTP
// front end's Authorization header: the same codes and messages.
Status AuthorizeAdminValue(const std::string* authorization, const std::string& token);

// Reads the admin token: the file's first line, surrounding whitespace removed. Errors name the
// file: unreadable, or empty.
StatusOr<std::string> ReadAdminToken(const std::string& path);

}  // namespace mha::serve
