// mha-server's assembly and life cycle: ServerCore (repository, schedulers, metrics), the
// metrics/health HTTP endpoint, the gRPC server (mha.v1 front end, health, reflection); models
// load on background threads while health says NOT_SERVING; SERVING; a clean stop on
// SIGTERM/SIGINT.
#pragma once

#include "server/app/config.h"
#include "server/app/signals.h"

namespace mha::serve {

// Runs the server until SIGTERM/SIGINT; returns the process exit code (0 after a clean stop).
int RunServer(const ServerConfig& config);

}  // namespace mha::serve
