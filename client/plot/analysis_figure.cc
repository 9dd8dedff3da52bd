#include "client/plot/analysis_figure.h"

#include <algorithm>
#include <cmath>

namespace mha::plot {
namespace {

constexpr double kBarLength = 170, kPanelSpacing = 28;

std::string HeadName(int64_t h) { return "h" + std::to_string(h); }

double RowHeight(size_t heads) {
  return std::clamp(std::floor(300.0 / static_cast<double>(heads)), 12.0, 26.0);
}

double HeatCell(size_t heads) {
  return std::clamp(std::floor(320.0 / static_cast<double>(heads)), 8.0, 44.0);
}

// Black on light cells, white on dark ones.
Rgb TextOn(const Rgb& c) {
  return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b > 0.55 ? kBlack : kWhite;
}

ColourScale CorrelationScale() {
  return {ColourScale::kDiverging, -1.0, 1.0, "Pearson correlation of the heads' W^O blocks"};
}

}  // namespace

StatusOr<AnalysisFigure> AnalysisFigure::Make(HeadAnalysisData data) {
  const size_t h = data.importance.size();
  if (h == 0 || data.effective_rank.size() != h || data.correlation.size() != h * h) {
    return InvalidArgument(
        "analysis figure: need H >= 1 importances, H ranks and H*H "
        "correlations, got " +
        std::to_string(h) + ", " + std::to_string(data.effective_rank.size()) + " and " +
        std::to_string(data.correlation.size()));
  }
  AnalysisFigure f;
  f.in_ = std::move(data);
  f.Layout();
  return f;
}

void AnalysisFigure::Layout() {
  const size_t heads = in_.importance.size();
  header_h_ = kMargin + kTitleLine + kNoteLine * in_.notes.size() + 8;
  const double label_w = RowTicksWidth(static_cast<int64_t>(heads), HeadName);
  const double value_w = TextWidth("0.000 / 000", kTickFont) + 8;
  const double bars_h = RowHeight(heads) * heads;
  const double top = header_h_ + kPanelTitle;
  importance_ = {kMargin + label_w, top, kBarLength, bars_h};
  rank_ = {importance_.right() + value_w + kPanelSpacing + label_w, top, kBarLength, bars_h};
  const double side = HeatCell(heads) * heads;
  heat_ = {rank_.right() + value_w + kPanelSpacing + label_w + 4, top, side, side};
  width_ = heat_.right() + 18 + ColourBarWidth(CorrelationScale()) + kMargin;
  const std::vector<std::string> lines = [&] {
    std::vector<std::string> all{in_.title};
    all.insert(all.end(), in_.notes.begin(), in_.notes.end());
    return all;
  }();
  for (size_t i = 0; i < lines.size(); ++i) {
    width_ =
        std::max(width_, 2 * kMargin + TextWidth(lines[i], i ? kSubtitleFont : kTitleFont, !i));
  }
  height_ = top + std::max({bars_h, side, 140.0}) + kBottomAxisHeight + kMargin;
}

void AnalysisFigure::DrawBars(Canvas& canvas, const Rect& plot, const std::vector<double>& values,
                              double high, const std::string& title, const std::string& axis,
                              bool of_max) const {
  canvas.Text(plot.x - RowTicksWidth(static_cast<int64_t>(values.size()), HeadName),
              plot.y - kPanelTitle / 2, title, TextStyle::Of(kPanelFont).Bold());
  for (double t : NiceTicks(0, high, BottomAxisTicks(plot.w))) {  // grid lines under the bars
    const double x = plot.x + plot.w * t / high;
    canvas.Line(x, plot.y, x, plot.bottom(), {0.88, 0.88, 0.88}, 0.6);
  }
  const double row = plot.h / values.size();
  for (size_t h = 0; h < values.size(); ++h) {
    const double y = plot.y + h * row;
    const double len = plot.w * std::clamp(values[h] / high, 0.0, 1.0);
    canvas.Fill({plot.x, y + row * 0.15, len, row * 0.7}, Viridis(0.25 + 0.5 * values[h] / high));
    const std::string value =
        of_max ? ValueText(values[h]) + " / " + ValueText(in_.max_rank) : ValueText(values[h]);
    canvas.Text(plot.x + len + 4, y + row / 2, value, TextStyle::Of(kTickFont));
  }
  DrawRowTicks(canvas, plot, static_cast<int64_t>(values.size()), HeadName);
  canvas.Line(plot.x, plot.y, plot.x, plot.bottom(), kBlack, 0.8);
  DrawBottomAxis(canvas, plot, 0, high, axis);
}

void AnalysisFigure::DrawCorrelation(Canvas& canvas, const Rect& map) const {
  const int64_t heads = static_cast<int64_t>(in_.importance.size());
  canvas.Text(map.x - RowTicksWidth(heads, HeadName), map.y - kPanelTitle / 2,
              "W^O head correlation", TextStyle::Of(kPanelFont).Bold());
  Cells cells{heads, heads, {in_.correlation.begin(), in_.correlation.end()}, {}};
  const ColourScale scale = CorrelationScale();
  DrawCells(canvas, map, cells, scale);
  const double cell = map.w / heads;
  if (cell >= 30) {  // room for the value in each cell
    for (int64_t i = 0; i < heads; ++i) {
      for (int64_t j = 0; j < heads; ++j) {
        const double v = in_.correlation[static_cast<size_t>(i * heads + j)];
        canvas.Text(map.x + (j + 0.5) * cell, map.y + (i + 0.5) * cell, TickText(v, 0.01),
                    TextStyle::Of(kTickFont - 1, Align::kCentre).Colour(TextOn(scale.At(v))));
      }
    }
  }
  DrawRowTicks(canvas, map, heads, HeadName);
  DrawColumnTicks(canvas, map, heads, HeadName);
  canvas.Text(map.x + map.w / 2, map.bottom() + kBottomAxisHeight, "head",
              TextStyle::Of(kLabelFont, Align::kCentre, Align::kEnd));
  DrawColourBar(canvas, {map.right() + 18, map.y, 0, std::max(map.h, 140.0)}, scale);
}

void AnalysisFigure::Draw(Canvas& canvas, double x, double y) const {
  double at = y + kMargin + kTitleFont / 2;
  canvas.Text(x + kMargin, at, in_.title, TextStyle::Of(kTitleFont).Bold());
  at += kTitleLine / 2 + kNoteLine / 2;
  for (const std::string& note : in_.notes) {
    canvas.Text(x + kMargin, at, note, TextStyle::Of(kSubtitleFont));
    at += kNoteLine;
  }
  auto moved = [&](Rect r) {
    r.x += x;
    r.y += y;
    return r;
  };
  const double top = *std::max_element(in_.importance.begin(), in_.importance.end());
  DrawBars(canvas, moved(importance_), in_.importance, top > 0 ? top : 1.0, "head importance",
           "||W^O block||_F / sum over heads", false);
  const double rank_high = std::max(
      in_.max_rank, *std::max_element(in_.effective_rank.begin(), in_.effective_rank.end()));
  DrawBars(canvas, moved(rank_), in_.effective_rank, rank_high > 0 ? rank_high : 1.0,
           "effective rank per head", "exp(entropy of singular values)", true);
  DrawCorrelation(canvas, moved(heat_));
}

}  // namespace mha::plot
