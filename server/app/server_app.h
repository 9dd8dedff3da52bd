// mha-server's assembly and life cycle: ServerCore (repository, schedulers, metrics), the
// metrics/health HTTP endpoint, the gRPC server (mha.v1 front end, health, reflection); models
// load on background threads while health says NOT_SERVING; SERVING; a clean stop on
// SIGTERM/SIGINT.
#pragma once

#include <functional>

#include "server/app/config.h"
#include "server/app/signals.h"

namespace mha::serve {

// Runs the server until SIGTERM/SIGINT; returns the process exit code (0 after a clean stop).
int RunServer(const ServerConfig& config);

// main() of mha-server: signal handlers, flags (ParseServerConfig), logging, RunServer; returns
// the exit code. `customize`, when set, changes the parsed configuration before the server runs:
// the service tests' server (tests/service/mha_test_server.cc) installs its pass hook there.
int ServerMain(int argc, char** argv, const std::function<void(ServerConfig*)>& customize = {});

}  // namespace mha::serve
