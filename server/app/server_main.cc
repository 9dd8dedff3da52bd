// mha-server's main() as a function: the shipped binary (main.cc) and the service tests' server
// (tests/service/mha_test_server.cc) run the same assembly.
#include <absl/synchronization/mutex.h>
#include <spdlog/spdlog.h>

#include <exception>

#include "server/app/config.h"
#include "server/app/logging.h"
#include "server/app/server_app.h"
#include "server/app/signals.h"

namespace mha::serve {

int ServerMain(int argc, char** argv, const std::function<void(ServerConfig*)>& customize) {
  // gRPC locks absl::Mutex on every call; an absl built without NDEBUG (Debian's) checks each lock
  // for deadlock cycles (a graph update per acquisition, ~1% of a loaded server's CPU in perf).
  // mha-server takes no absl lock of its own: the check finds nothing to report here.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  InstallShutdownSignalHandlers();
  ServerConfig config;
  if (auto code = ParseServerConfig(argc, argv, &config)) return *code;
  if (customize) customize(&config);
  const Status logging = SetupLogging(config.log_format, config.log_level);
  if (!logging.ok()) {
    spdlog::error("{}", logging.message());
    return 2;
  }
  try {
    return RunServer(config);
  } catch (const std::exception& e) {
    spdlog::critical("mha-server: {}", e.what());
    return 1;
  }
}

}  // namespace mha::serve
