// mha-server's main() as a function: the shipped binary (main.cc) and the service tests' server
// (tests/service/mha_test_server.cc) run the same assembly.
#include <spdlog/spdlog.h>

#include <exception>

#include "server/app/config.h"
#include "server/app/logging.h"
#include "server/app/server_app.h"
#include "server/app/signals.h"

namespace mha::serve {

int ServerMain(int argc, char** argv, const std::function<void(ServerConfig*)>& customize) {
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
