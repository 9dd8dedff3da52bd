#include "client/plot/axes.h"

#include <algorithm>
#include <cmath>

namespace mha::plot {
namespace {

constexpr Rgb kGridColour{0.88, 0.88, 0.88};

}  // namespace

Cells DownsampleMax(const Cells& cells, int64_t max_rows, int64_t max_cols, int64_t* row_factor,
                    int64_t* col_factor) {
  auto factor = [](int64_t n, int64_t most) {
    return most > 0 && n > most ? (n + most - 1) / most : 1;
  };
  *row_factor = factor(cells.rows, max_rows);
  *col_factor = factor(cells.cols, max_cols);
  if (*row_factor == 1 && *col_factor == 1) return cells;
  const int64_t fr = *row_factor, fc = *col_factor;
  Cells out;
  out.rows = (cells.rows + fr - 1) / fr;
  out.cols = (cells.cols + fc - 1) / fc;
  out.values.assign(static_cast<size_t>(out.rows * out.cols), -INFINITY);
  if (!cells.masked.empty()) out.masked.assign(out.values.size(), 1);
  for (int64_t r = 0; r < cells.rows; ++r) {
    for (int64_t c = 0; c < cells.cols; ++c) {
      const size_t from = static_cast<size_t>(r * cells.cols + c);
      const size_t to = static_cast<size_t>((r / fr) * out.cols + c / fc);
      if (!cells.masked.empty()) {
        if (cells.masked[from]) continue;  // a masked cell's weight says nothing about the block
        out.masked[to] = 0;
      }
      const float v = cells.values[from];
      out.values[to] =
          std::isnan(v) || std::isnan(out.values[to]) ? NAN : std::max(out.values[to], v);
    }
  }
  return out;
}

void DrawCells(Canvas& canvas, const Rect& area, const Cells& cells, const ColourScale& scale) {
  if (cells.rows <= 0 || cells.cols <= 0) return;
  const double w = area.w / cells.cols, h = area.h / cells.rows;
  for (int64_t r = 0; r < cells.rows; ++r) {
    for (int64_t c = 0; c < cells.cols; ++c) {
      const size_t i = static_cast<size_t>(r * cells.cols + c);
      const Rect cell{area.x + c * w, area.y + r * h, w, h};
      if (!cells.masked.empty() && cells.masked[i]) {
        canvas.Hatch(cell);
      } else {
        // A hair wider than the cell: no seams between neighbours under anti-aliasing.
        canvas.Fill({cell.x, cell.y, w + 0.3, h + 0.3}, scale.At(cells.values[i]));
      }
    }
  }
  canvas.Stroke(area, kGrey, 0.8);
}

int64_t LabelStride(double spacing, double label) {
  for (int64_t power = 1;; power *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (spacing * m * power >= label || power > (int64_t{1} << 40)) return m * power;
    }
  }
}

double RowTicksWidth(int64_t count, const IndexLabel& label) {
  double widest = 0;
  for (int64_t i = 0; i < count; ++i) widest = std::max(widest, TextWidth(label(i), kTickFont));
  return widest + 5;
}

void DrawRowTicks(Canvas& canvas, const Rect& area, int64_t count, const IndexLabel& label) {
  if (count <= 0) return;
  const double h = area.h / count;
  const int64_t stride = LabelStride(h, kTickFont + 3);
  for (int64_t i = 0; i < count; i += stride) {
    const double y = area.y + (i + 0.5) * h;
    canvas.Line(area.x - 2, y, area.x, y, kBlack, 0.8);
    canvas.Text(area.x - 4, y, label(i), TextStyle::Of(kTickFont, Align::kEnd));
  }
}

void DrawColumnTicks(Canvas& canvas, const Rect& area, int64_t count, const IndexLabel& label) {
  if (count <= 0) return;
  const double w = area.w / count;
  const double widest = TextWidth(label(count - 1), kTickFont) + 6;
  const int64_t stride = LabelStride(w, widest);
  for (int64_t i = 0; i < count; i += stride) {
    const double x = area.x + (i + 0.5) * w;
    canvas.Line(x, area.bottom(), x, area.bottom() + 2, kBlack, 0.8);
    canvas.Text(x, area.bottom() + 4, label(i),
                TextStyle::Of(kTickFont, Align::kCentre, Align::kStart));
  }
}

double ValueAxisWidth(double lo, double hi) {
  const std::vector<double> ticks = NiceTicks(lo, hi, 6);
  double widest = 0;
  for (double t : ticks)
    widest = std::max(widest, TextWidth(TickText(t, TickStep(ticks)), kTickFont));
  return widest + 6 + kLabelFont + 8;
}

void DrawValueAxis(Canvas& canvas, const Rect& plot, double lo, double hi,
                   const std::string& label) {
  const std::vector<double> ticks = NiceTicks(lo, hi, 6);
  for (double t : ticks) {
    const double y = hi > lo ? plot.bottom() - plot.h * (t - lo) / (hi - lo) : plot.bottom();
    canvas.Line(plot.x, y, plot.right(), y, kGridColour, 0.6);
    canvas.Line(plot.x - 3, y, plot.x, y, kBlack, 0.8);
    canvas.Text(plot.x - 5, y, TickText(t, TickStep(ticks)), TextStyle::Of(kTickFont, Align::kEnd));
  }
  canvas.Line(plot.x, plot.y, plot.x, plot.bottom(), kBlack, 0.8);
  canvas.Text(plot.x - ValueAxisWidth(lo, hi) + kLabelFont / 2, plot.y + plot.h / 2, label,
              TextStyle::Of(kLabelFont, Align::kCentre).Vertical());
}

void DrawBottomAxis(Canvas& canvas, const Rect& plot, double lo, double hi,
                    const std::string& label) {
  const std::vector<double> ticks = NiceTicks(lo, hi, BottomAxisTicks(plot.w));
  for (double t : ticks) {
    const double x = hi > lo ? plot.x + plot.w * (t - lo) / (hi - lo) : plot.x;
    canvas.Line(x, plot.bottom(), x, plot.bottom() + 3, kBlack, 0.8);
    canvas.Text(x, plot.bottom() + 5, TickText(t, TickStep(ticks)),
                TextStyle::Of(kTickFont, Align::kCentre, Align::kStart));
  }
  canvas.Line(plot.x, plot.bottom(), plot.right(), plot.bottom(), kBlack, 0.8);
  canvas.Text(plot.x + plot.w / 2, plot.bottom() + kBottomAxisHeight, label,
              TextStyle::Of(kLabelFont, Align::kCentre, Align::kEnd));
}

}  // namespace mha::plot
