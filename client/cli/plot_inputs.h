// What mha-client's --plot options draw, made from the server's answers: at::Tensor and protos
// in, the inputs of the torch-free figures (client/plot) out. docs/heads.md shows the pictures.
#pragma once

#include <ATen/core/Tensor.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "client/bench/bench_runner.h"
#include "client/bench/decode_bench.h"
#include "client/plot/analysis_figure.h"
#include "client/plot/attention_figure.h"
#include "client/plot/latency_figure.h"
#include "client/tensor_client.h"
#include "mha/status.h"

namespace mha::client::cli {

// Batch row `row` of a forward answer's weights (dense, or top-k scattered onto zeros): one panel
// per returned head (named by its index in the model, weights_heads when given) or one for the
// weights averaged over heads; the rows are the returned query positions (weights_query_begin
// on). Positions that key_padding_mask, attn_mask (BOOL true or a floating -inf) or is_causal
// hide are marked masked, and heads whose head_mask is 0 are marked masked heads. The title names
// the model, version and batch row; the notes say what was asked. INVALID_ARGUMENT naming
// --plot-row when the row is outside the batch, or --plot when the answer has no weights.
StatusOr<plot::AttentionMaps> ForwardMaps(const ForwardResult& result,
                                          const v1::ForwardRequest& request, int64_t row);

// A decoding session's last step: its weights [B, 1, L] (averaged) or [B, H, 1, L] (per head),
// batch row `row`, as one panel with the heads (or their mean) down and the L cached positions
// across. INVALID_ARGUMENT naming --plot-row or the shape when they do not fit.
StatusOr<plot::AttentionMaps> StepMaps(const at::Tensor& weights, int64_t row,
                                       const std::string& title);

// The W^O part of a model's analysis: importance, effective rank per head, correlation; the title
// names the model, version, E, H and head_dim.
plot::HeadAnalysisData AnalysisData(const v1::ModelAnalysis& analysis);

// The answered calls of a bench run and the steps of a decode run, with their percentiles.
plot::LatencySamples BenchSamples(const BenchReport& report);
plot::LatencySamples DecodeSamples(const DecodeBenchReport& report);

// --plot FILE on `cmd`: the help says what is drawn (`what`) and the formats; a path whose
// extension is not .png, .svg or .pdf fails the parse of the command line, before anything runs.
CLI::Option* AddPlotOption(CLI::App* cmd, std::string* path, const std::string& what);

// Writes `figures` (stacked) to `path` and prints "wrote PATH (W x H PNG/SVG/PDF)" to `out`.
Status WritePlot(const std::string& path, const std::vector<const plot::Figure*>& figures,
                 FILE* out = stdout);

// bench --plot: the run's latency figure titled `title` with the line `note` under it.
Status PlotLoad(const std::string& path, plot::LatencySamples samples, const std::string& title,
                const std::string& note, FILE* out);

// decode --plot: the steps' latency figure and, when the report holds them (need_weights, plain
// sessions), session 0's last step's weights of batch row `row` below it; a note on `out` when
// weights were asked but not kept.
Status PlotDecode(const std::string& path, const DecodeBenchOptions& options,
                  const DecodeBenchReport& report, int64_t row, FILE* out);

}  // namespace mha::client::cli
