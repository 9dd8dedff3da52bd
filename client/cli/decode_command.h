// mha-client decode --tokens N --sessions M: the decoding-session load generator
// (client/bench/decode_bench.h, docs/sessions.md), and its --plot picture.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "client/bench/decode_bench.h"
#include "client/mha_client.h"

namespace mha::client::cli {

struct DecodeCommand {
  void Add(CLI::App& app);
  // The exit code: 0 when every step was answered.
  int Run(AttentionClient& client, std::chrono::milliseconds timeout);

  CLI::App* cmd = nullptr;
  DecodeBenchOptions options;
  bool json = false;
  std::string plot_file;
  int64_t plot_row = 0;
};

}  // namespace mha::client::cli
