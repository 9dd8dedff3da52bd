// Colour scales of mha-client's pictures: viridis for weights (0 .. largest), a blue-white-red
// diverging map for correlations (-1 .. 1), the ticks of an axis, and the labelled colour bar
// drawn beside a heat map.
#pragma once

#include <string>
#include <vector>

#include "client/plot/canvas.h"

namespace mha::plot {

// matplotlib's viridis at t in [0, 1] (clamped), from its nine eighth-step anchors.
Rgb Viridis(double t);
// Blue (-1) - white (0) - red (1), ColorBrewer's RdBu reversed; v clamped to [-1, 1].
Rgb Diverging(double v);
// What a value that is not a number (NaN) is drawn as.
inline constexpr Rgb kNanColour{0.5, 0.5, 0.5};

struct ColourScale {
  enum Map { kViridis, kDiverging } map = kViridis;
  double lo = 0, hi = 1;  // the ends of the bar; values outside are clamped
  std::string label;      // what the colour means, written along the bar
  Rgb At(double value) const;
};

// Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi], at most about
// `max_ticks` of them, all inside [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int max_ticks);
// A tick value with as many decimals as the ticks' step needs ("0.25", "10", "-1").
std::string TickText(double value, double step);
// The step between the first two of `ticks` (1 when there are fewer).
double TickStep(const std::vector<double>& ticks);
// A value for a label: three significant digits ("0.253", "12.5"), whole numbers from 1000 on.
std::string ValueText(double value);

// The units a colour bar takes beside a heat map: the bar, its tick labels and its label.
double ColourBarWidth(const ColourScale& scale);
// The bar in `bar` (lo at the bottom, hi at the top), ticks and their values to its right, the
// scale's label to their right, read bottom to top.
void DrawColourBar(Canvas& canvas, const Rect& bar, const ColourScale& scale);

}  // namespace mha::plot
