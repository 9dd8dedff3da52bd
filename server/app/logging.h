// spdlog set-up for mha-server: text ("2024-01-01 12:00:00.123 [info] message") or JSON lines
// ({"ts":"...","level":"info","msg":"..."}), to stderr.
#pragma once

#include <string>

#include "mha/status.h"

namespace mha::serve {

Status SetupLogging(const std::string& format, const std::string& level);

}  // namespace mha::serve
