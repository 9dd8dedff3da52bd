// mha-client afd: the FFN side of attention-FFN disaggregation against a Llama model's
// LayerSteps stream (client/afd_bench.h, docs/afd.md).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>

#include "client/bench/afd_bench.h"
#include "client/mha_client.h"

namespace mha::client::cli {

struct AfdCommand {
  void Add(CLI::App& app);
  // The exit code: 0 when every step was answered.
  int Run(AttentionClient& client, std::chrono::milliseconds timeout);

  CLI::App* cmd = nullptr;
  AfdBenchOptions options;
  bool json = false;
};

}  // namespace mha::client::cli
