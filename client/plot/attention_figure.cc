#include "client/plot/attention_figure.h"

#include <algorithm>
#include <cmath>

namespace mha::plot {
namespace {

constexpr double kMapSide = 256, kMinCell = 3, kMaxCell = 28;
constexpr double kMapTitle = 20, kPanelGap = 18, kBelowMap = 34, kAxisLabel = 14;
constexpr double kLegendLine = 20;
constexpr int kMaxColumns = 4;

std::string Size(size_t n) { return std::to_string(n); }

double CellSide(int64_t shown) {
  return std::clamp(std::floor(kMapSide / static_cast<double>(shown)), kMinCell, kMaxCell);
}

}  // namespace

StatusOr<AttentionFigure> AttentionFigure::Make(AttentionMaps maps) {
  const size_t panels = maps.panels.size();
  const size_t plane =
      static_cast<size_t>(std::max<int64_t>(maps.rows, 0) * std::max<int64_t>(maps.keys, 0));
  if (panels == 0 || maps.rows <= 0 || maps.keys <= 0) {
    return InvalidArgument("attention figure: need at least one panel of rows x keys, got " +
                           Size(panels) + " panels of " + std::to_string(maps.rows) + "x" +
                           std::to_string(maps.keys));
  }
  if (maps.weights.size() != panels * plane) {
    return InvalidArgument("attention figure: " + Size(maps.weights.size()) + " weights for " +
                           Size(panels) + " panels of " + std::to_string(maps.rows) + "x" +
                           std::to_string(maps.keys));
  }
  if (!maps.masked.empty() && maps.masked.size() != plane && maps.masked.size() != panels * plane) {
    return InvalidArgument("attention figure: a mask of " + Size(maps.masked.size()) +
                           " cells for panels of " + Size(plane));
  }
  if ((!maps.panel_masked.empty() && maps.panel_masked.size() != panels) ||
      (!maps.row_names.empty() && maps.row_names.size() != static_cast<size_t>(maps.rows))) {
    return InvalidArgument("attention figure: " + Size(maps.panel_masked.size()) +
                           " head marks and " + Size(maps.row_names.size()) + " row names for " +
                           Size(panels) + " panels of " + std::to_string(maps.rows) + " rows");
  }
  AttentionFigure f;
  f.in_ = std::move(maps);
  f.Layout();
  return f;
}

void AttentionFigure::Layout() {
  const size_t panels = in_.panels.size();
  const size_t plane = static_cast<size_t>(in_.rows * in_.keys);
  double high = 0;
  for (size_t p = 0; p < panels; ++p) {
    Cells cells{in_.rows, in_.keys, {}, {}};
    cells.values.assign(in_.weights.begin() + p * plane, in_.weights.begin() + (p + 1) * plane);
    if (!in_.masked.empty()) {
      const size_t at = in_.masked.size() == plane ? 0 : p * plane;
      cells.masked.assign(in_.masked.begin() + at, in_.masked.begin() + at + plane);
    }
    shown_.push_back(
        DownsampleMax(cells, in_.max_cells, in_.max_cells, &row_factor_, &key_factor_));
    const bool head_masked = !in_.panel_masked.empty() && in_.panel_masked[p];
    any_masked_panel_ |= head_masked;
    for (size_t i = 0; i < shown_.back().values.size(); ++i) {
      const bool cell_masked = !shown_.back().masked.empty() && shown_.back().masked[i];
      any_masked_cell_ |= cell_masked;
      const float v = shown_.back().values[i];
      if (!head_masked && !cell_masked && std::isfinite(v)) high = std::max(high, double{v});
    }
  }
  scale_ = {ColourScale::kViridis, 0.0, high > 0 ? high : 1.0, in_.scale_label};
  header_ = {in_.title};
  header_.insert(header_.end(), in_.notes.begin(), in_.notes.end());
  if (row_factor_ > 1 || key_factor_ > 1) {
    header_.push_back("max-pooled view of " + std::to_string(in_.rows) + " x " +
                      std::to_string(in_.keys) + ": each cell is the largest weight of " +
                      std::to_string(row_factor_) + " row(s) x " + std::to_string(key_factor_) +
                      " key(s), labelled by the block's first position");
  }
  header_h_ = kMargin + kTitleLine + kNoteLine * (header_.size() - 1) +
              (any_masked_cell_ || any_masked_panel_ ? kLegendLine : 0) + 6;
  const double cell_w = CellSide(shown_keys()), cell_h = CellSide(shown_rows());
  const double map_w = cell_w * shown_keys(), map_h = cell_h * shown_rows();
  const double left =
      kAxisLabel + RowTicksWidth(shown_rows(), [this](int64_t r) { return RowLabel(r); });
  const double panel_w = left + map_w + kPanelGap, panel_h = kMapTitle + map_h + kBelowMap;
  const size_t columns = std::min<size_t>(panels, kMaxColumns);
  const size_t grid_rows = (panels + columns - 1) / columns;
  for (size_t p = 0; p < panels; ++p) {
    const size_t grid_row = p / columns, grid_column = p % columns;  // the panel's place
    maps_rect_.push_back({kMargin + grid_column * panel_w + left,
                          header_h_ + grid_row * panel_h + kMapTitle, map_w, map_h});
  }
  const double bar_h = std::max(map_h, 120.0);
  width_ = kMargin + columns * panel_w + ColourBarWidth(scale_) + kMargin;
  for (size_t i = 0; i < header_.size(); ++i) {
    const double size = i == 0 ? kTitleFont : kSubtitleFont;
    width_ = std::max(width_, 2 * kMargin + TextWidth(header_[i], size, i == 0));
  }
  height_ =
      std::max(header_h_ + grid_rows * panel_h, header_h_ + kMapTitle + bar_h + 20) + kMargin / 2;
}

std::string AttentionFigure::RowLabel(int64_t shown_row) const {
  const int64_t row = shown_row * row_factor_;
  return in_.row_names.empty() ? std::to_string(in_.first_row + row)
                               : in_.row_names[static_cast<size_t>(row)];
}

std::string AttentionFigure::KeyLabel(int64_t shown_col) const {
  return std::to_string(shown_col * key_factor_);
}

void AttentionFigure::CellCentre(size_t panel, int64_t row, int64_t col, double* x,
                                 double* y) const {
  const Rect& m = maps_rect_[panel];
  *x = m.x + (col + 0.5) * m.w / shown_keys();
  *y = m.y + (row + 0.5) * m.h / shown_rows();
}

void AttentionFigure::DrawHeader(Canvas& canvas, double x, double y) const {
  double at = y + kMargin + kTitleFont / 2;
  canvas.Text(x + kMargin, at, header_[0], TextStyle::Of(kTitleFont).Bold());
  at += kTitleLine / 2 + kNoteLine / 2;
  for (size_t i = 1; i < header_.size(); ++i, at += kNoteLine) {
    canvas.Text(x + kMargin, at, header_[i], TextStyle::Of(kSubtitleFont));
  }
  double legend_x = x + kMargin;
  auto legend = [&](const std::string& text) {
    canvas.Hatch({legend_x, at - 6, 18, 12});
    canvas.Text(legend_x + 24, at, text, TextStyle::Of(kSubtitleFont));
    legend_x += 24 + TextWidth(text, kSubtitleFont) + 18;
  };
  if (any_masked_cell_) legend(in_.masked_legend);
  if (any_masked_panel_) legend(in_.panel_masked_legend);
}

void AttentionFigure::DrawPanel(Canvas& canvas, size_t p, double x, double y) const {
  Rect m = maps_rect_[p];
  m.x += x;
  m.y += y;
  canvas.Text(m.x, m.y - kMapTitle / 2, in_.panels[p], TextStyle::Of(kPanelFont).Bold());
  if (!in_.panel_masked.empty() && in_.panel_masked[p]) {
    canvas.Hatch(m);
    canvas.Stroke(m, kGrey, 0.8);
  } else {
    DrawCells(canvas, m, shown_[p], scale_);
  }
  DrawRowTicks(canvas, m, shown_rows(), [this](int64_t r) { return RowLabel(r); });
  DrawColumnTicks(canvas, m, shown_keys(), [this](int64_t c) { return KeyLabel(c); });
  const double ticks_w = RowTicksWidth(shown_rows(), [this](int64_t r) { return RowLabel(r); });
  canvas.Text(m.x - ticks_w - kAxisLabel / 2, m.y + m.h / 2, in_.row_axis,
              TextStyle::Of(kLabelFont, Align::kCentre).Vertical());
  canvas.Text(m.x + m.w / 2, m.bottom() + kBelowMap - 4, in_.key_axis,
              TextStyle::Of(kLabelFont, Align::kCentre, Align::kEnd));
}

void AttentionFigure::Draw(Canvas& canvas, double x, double y) const {
  DrawHeader(canvas, x, y);
  double right = 0;
  for (size_t p = 0; p < shown_.size(); ++p) {
    DrawPanel(canvas, p, x, y);
    right = std::max(right, maps_rect_[p].right());
  }
  const Rect& first = maps_rect_.front();
  DrawColourBar(canvas, {x + right + kPanelGap, y + first.y, 0, std::max(first.h, 120.0)}, scale_);
}

}  // namespace mha::plot
