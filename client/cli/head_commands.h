// mha-client's head pictures and analysis (docs/heads.md): `forward -w ... --plot FILE` draws the
// returned weights, `analyze [MODEL] [--plot FILE]` prints (and draws) the head analysis; FILE is
// a .png, .svg or .pdf.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "client/mha_client.h"
#include "client/tensor_client.h"

namespace mha::client::cli {

// The weights of batch row `row` as heat maps, one per head (plot_inputs.h: ForwardMaps).
Status PlotForward(const ForwardResult& result, const v1::ForwardRequest& request, int64_t row,
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
