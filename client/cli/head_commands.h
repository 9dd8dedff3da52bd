// mha-client's head pictures and analysis (docs/heads.md): `forward ... --plot FILE.png` draws the
// returned weights, `analyze [MODEL] [--plot FILE.png]` prints (and draws) the W^O head analysis
// (docs/heads.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "client/mha_client.h"
#include "client/tensor_client.h"

namespace mha::client::cli {

// The weights of batch row 0 as heatmap panels (dense, or top-k scattered onto zeros).
Status PlotForward(const ForwardResult& result, const v1::ForwardRequest& request,
                   const std::string& path);

// Head statistics, when returned: per head, the mean entropy and mean max weight over rows.
void PrintHeadStats(const ForwardResult& result);

struct AnalyzeCommand {
  void Add(CLI::App& app);
  int Run(AttentionClient& client);

  CLI::App* cmd = nullptr;
  std::string model, version, plot_file;
};

}  // namespace mha::client::cli
