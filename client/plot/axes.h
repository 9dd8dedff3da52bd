// The pieces figures are made of: a matrix drawn as coloured cells (with its masked cells
// hatched, and a max-pooled view of a big one), index ticks along its sides, and value axes with
// round ticks for charts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/plot/canvas.h"
#include "client/plot/colour.h"

namespace mha::plot {

inline constexpr double kTickFont = 9, kLabelFont = 10, kPanelFont = 11, kTitleFont = 15,
                        kSubtitleFont = 10.5;

// A matrix shown as cells, rows top to bottom, columns left to right.
struct Cells {
  int64_t rows = 0, cols = 0;
  std::vector<float> values;    // rows * cols, row-major
  std::vector<uint8_t> masked;  // empty, or rows * cols: nonzero cells are hatched, not coloured
};

// `cells` as blocks of row_factor x col_factor cells, each factor the smallest that leaves at most
// `max_rows` / `max_cols` blocks on its axis; a block shows the largest value in it (a peak stays
// visible; a NaN shows as NaN) of its unmasked cells, and is masked only when all of its cells are.
// Factors of 1: unchanged.
Cells DownsampleMax(const Cells& cells, int64_t max_rows, int64_t max_cols, int64_t* row_factor,
                    int64_t* col_factor);

// Every cell in `area` (area.w / cols by area.h / rows each), coloured by `scale`, masked ones
// hatched; a thin frame around.
void DrawCells(Canvas& canvas, const Rect& area, const Cells& cells, const ColourScale& scale);

// Which indices get a tick label when each index takes `spacing` units and a label needs `label`
// units: every k-th, k the smallest of 1, 2, 5, 10, 20, 50, ... that keeps them apart.
int64_t LabelStride(double spacing, double label);

using IndexLabel = std::function<std::string(int64_t)>;
// Tick labels of `count` rows (centred on each row, right-aligned left of `area`) and the widest
// label's width (for layouts: RowTicksWidth measures without drawing).
double RowTicksWidth(int64_t count, const IndexLabel& label);
void DrawRowTicks(Canvas& canvas, const Rect& area, int64_t count, const IndexLabel& label);
// Tick labels of `count` columns, centred under each column below `area`.
void DrawColumnTicks(Canvas& canvas, const Rect& area, int64_t count, const IndexLabel& label);

// A value axis along the left side of `plot` (lo at the bottom) with round ticks, light grid
// lines across the plot and `label` read bottom to top; ValueAxisWidth is the room it takes.
double ValueAxisWidth(double lo, double hi);
void DrawValueAxis(Canvas& canvas, const Rect& plot, double lo, double hi,
                   const std::string& label);
// The same along the bottom of `plot` (lo at the left), `label` centred below the ticks.
void DrawBottomAxis(Canvas& canvas, const Rect& plot, double lo, double hi,
                    const std::string& label);
// The room DrawBottomAxis takes below the plot, and at most about how many ticks it writes along
// `width` units (one per 34 units, so that their labels stay apart).
inline constexpr double kBottomAxisHeight = 34;
inline int BottomAxisTicks(double width) { return std::max(2, static_cast<int>(width / 34)); }

}  // namespace mha::plot
