#include "client/cli/head_commands.h"

#include <ATen/ATen.h>

#include <cstdio>

#include "client/cli/cli_util.h"
#include "client/cli/plot_inputs.h"

namespace mha::client::cli {
namespace {

void PrintBars(const char* title, const v1::ProjectionAnalysis& p) {
  std::printf("%s head importance (Frobenius norm share), effective rank %.2f / %lld:\n", title,
              p.effective_rank(), static_cast<long long>(p.max_rank()));
  for (int h = 0; h < p.head_importance_size(); ++h) {
    std::string bar;
    for (int i = 0; i < static_cast<int>(p.head_importance(h) * 40); ++i) bar += "\u2588";
    std::printf("  h%-3d %.3f  rank %5.2f / %lld  %s\n", h, p.head_importance(h),
                p.head_effective_rank(h), static_cast<long long>(p.head_max_rank()), bar.c_str());
  }
}

void PrintCorrelation(const v1::ProjectionAnalysis& p) {
  const int heads = p.head_importance_size();
  std::printf("W^O head correlation (Pearson, flattened blocks):\n      ");
  for (int j = 0; j < heads; ++j) std::printf("  h%-4d", j);
  std::printf("\n");
  double off = 0;
  for (int i = 0; i < heads; ++i) {
    std::printf("  h%-3d", i);
    for (int j = 0; j < heads; ++j) {
      std::printf(" %6.3f", p.head_correlation(i * heads + j));
      if (i != j) off += p.head_correlation(i * heads + j);
    }
    std::printf("\n");
  }
  if (heads > 1) {
    std::printf("  average pairwise correlation %.3f (low = specialised heads, high = redundant)\n",
                off / (heads * heads - heads));
  }
}

}  // namespace

Status PlotForward(const ForwardResult& r, const v1::ForwardRequest& request, int64_t row,
                   const std::string& path) {
  auto maps = ForwardMaps(r, request, row);
  if (!maps.ok()) return maps.status();
  auto figure = plot::AttentionFigure::Make(std::move(maps.value()));
  if (!figure.ok()) return figure.status();
  return WritePlot(path, {&figure.value()});
}

void PrintHeadStats(const ForwardResult& r) {
  if (!r.head_entropy.defined()) return;
  const at::Tensor entropy = r.head_entropy.to(at::kDouble).mean(at::IntArrayRef{0, 2});
  const at::Tensor top = r.head_max_weight.to(at::kDouble).mean(at::IntArrayRef{0, 2});
  std::printf("head_stats (mean over batch and query rows):\n");
  for (int64_t h = 0; h < entropy.size(0); ++h) {
    std::printf("  h%-3lld entropy %.4f nats  max weight %.4f\n", static_cast<long long>(h),
                entropy[h].item<double>(), top[h].item<double>());
  }
}

void AnalyzeCommand::Add(CLI::App& app) {
  cmd = app.add_subcommand("analyze",
                           "The head analysis of a model's W^O (and W^Q/K/V): docs/heads.md");
  cmd->add_option("model", model, "Model name ('' = default)");
  cmd->add_option("--model-version", version, "Version ('' = newest READY)");
  AddPlotOption(cmd, &plot_file,
                "Draw W^O's head importance, effective rank per head and head correlation");
}

int AnalyzeCommand::Run(AttentionClient& client) {
  auto a = client.AnalyzeModel(model, version);
  if (!a.ok()) return Fail(a.status());
  std::printf("model %s v%s: H=%lld head_dim=%lld E=%lld\n", a->model().c_str(),
              a->model_version().c_str(), static_cast<long long>(a->num_heads()),
              static_cast<long long>(a->head_dim()), static_cast<long long>(a->embed_dim()));
  PrintBars("W^O", a->output_projection());
  PrintCorrelation(a->output_projection());
  PrintBars("W^Q", a->query_projection());
  PrintBars("W^K", a->key_projection());
  PrintBars("W^V", a->value_projection());
  if (!plot_file.empty()) {
    auto figure = plot::AnalysisFigure::Make(AnalysisData(*a));
    if (!figure.ok()) return Fail(figure.status());
    if (const Status s = WritePlot(plot_file, {&figure.value()}); !s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace mha::client::cli
