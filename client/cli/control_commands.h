// mha-client load | unload | index: the model control calls (mha.v1.ModelControlService);
// mha-client stats [MODEL]: per-version statistics (GetModelStatistics).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "client/mha_client.h"

namespace mha::client::cli {

struct ControlCommands {
  void Add(CLI::App& app);
  // -1 when none of them was given.
  int Run(AttentionClient& client);

  CLI::App* load = nullptr;
  CLI::App* unload = nullptr;
  CLI::App* index = nullptr;
  CLI::App* stats = nullptr;
  std::string model, version;
};

// --admin-token-file FILE (env MHA_ADMIN_TOKEN_FILE): the token for the control calls.
void AddAdminTokenFlag(CLI::App& app, std::string* file);
// The token in `file` (first line, trimmed); "" when file is "".
StatusOr<std::string> ReadTokenFile(const std::string& file);

}  // namespace mha::client::cli
