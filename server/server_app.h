// mha-server's life cycle: threads, runner, gRPC server (callback API, health, reflection),
// model loading, SERVING, then a clean stop on SIGTERM/SIGINT.
#pragma once

#include "config.h"

namespace mha::serve {

// Routes SIGINT/SIGTERM to the graceful stop (a self-pipe read by a watcher thread) and ignores
// SIGPIPE. Call first thing in main.
void InstallShutdownSignalHandlers();

// Runs the server until SIGTERM/SIGINT; returns the process exit code (0 after a clean stop).
int RunServer(const ServerConfig& config);

}  // namespace mha::serve
