// mha-server: multi-head-attention forward passes over gRPC. See `mha-server --help`.
#include <spdlog/spdlog.h>

#include <exception>

#include "server/app/config.h"
#include "server/app/logging.h"
#include "server/app/server_app.h"
#include "server/app/signals.h"

int main(int argc, char** argv) {
  mha::serve::InstallShutdownSignalHandlers();
  mha::serve::ServerConfig config;
  if (auto code = mha::serve::ParseServerConfig(argc, argv, &config)) return *code;
  const mha::Status logging = mha::serve::SetupLogging(config.log_format, config.log_level);
  if (!logging.ok()) {
    spdlog::error("{}", logging.message());
    return 2;
  }
  try {
    return mha::serve::RunServer(config);
  } catch (const std::exception& e) {
    spdlog::critical("mha-server: {}", e.what());
    return 1;
  }
}
