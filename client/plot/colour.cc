#include "client/plot/colour.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace mha::plot {
namespace {

constexpr double kBarWidth = 14, kTickSize = 10;

template <size_t N>
Rgb Interpolate(const std::array<std::array<int, 3>, N>& anchors, double t) {
  const double at = std::clamp(t, 0.0, 1.0) * (N - 1);
  const size_t i = std::min(static_cast<size_t>(at), N - 2);
  const double f = at - static_cast<double>(i);
  auto mix = [&](int k) { return (anchors[i][k] * (1 - f) + anchors[i + 1][k] * f) / 255.0; };
  return {mix(0), mix(1), mix(2)};
}

}  // namespace

double TickStep(const std::vector<double>& ticks) {
  return ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0;
}

Rgb Viridis(double t) {
  static constexpr std::array<std::array<int, 3>, 9> kAnchors = {{{68, 1, 84},
                                                                  {72, 40, 120},
                                                                  {62, 73, 137},
                                                                  {49, 104, 142},
                                                                  {38, 130, 142},
                                                                  {31, 158, 137},
                                                                  {53, 183, 121},
                                                                  {110, 206, 88},
                                                                  {253, 231, 37}}};
  return Interpolate(kAnchors, t);
}

Rgb Diverging(double v) {
  static constexpr std::array<std::array<int, 3>, 5> kAnchors = {
      {{33, 102, 172}, {146, 197, 222}, {247, 247, 247}, {244, 165, 130}, {178, 24, 43}}};
  return Interpolate(kAnchors, (std::clamp(v, -1.0, 1.0) + 1.0) / 2.0);
}

Rgb ColourScale::At(double value) const {
  if (std::isnan(value)) return kNanColour;
  const double t = hi > lo ? (value - lo) / (hi - lo) : 0.0;
  return map == kViridis ? Viridis(t) : Diverging(2.0 * t - 1.0);
}

std::vector<double> NiceTicks(double lo, double hi, int max_ticks) {
  if (!(hi > lo) || max_ticks < 2) return {lo};
  const double raw = (hi - lo) / (max_ticks - 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string TickText(double value, double step) {
  const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 6);
  const double scale = std::pow(10.0, decimals);
  const double rounded = std::round(value * scale) / scale;
  char text[32];  // + 0.0: a value that rounds to zero is "0.00", never "-0.00"
  std::snprintf(text, sizeof(text), "%.*f", decimals, rounded + 0.0);
  return text;
}

std::string ValueText(double value) {
  char text[32];
  if (std::abs(value) >= 1000 && std::abs(value) < 1e9) {  // 2386, not 2.39e+03
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.3g", value);
  }
  return text;
}

double ColourBarWidth(const ColourScale& scale) {
  const std::vector<double> ticks = NiceTicks(scale.lo, scale.hi, 6);
  double widest = 0;
  for (double t : ticks)
    widest = std::max(widest, TextWidth(TickText(t, TickStep(ticks)), kTickSize));
  return kBarWidth + 4 + widest + 8 + kTickSize + 4;
}

void DrawColourBar(Canvas& canvas, const Rect& bar, const ColourScale& scale) {
  constexpr int kSlices = 128;
  const double slice = bar.h / kSlices;
  for (int i = 0; i < kSlices; ++i) {  // bottom slice = lo
    const double v = scale.lo + (scale.hi - scale.lo) * (i + 0.5) / kSlices;
    canvas.Fill({bar.x, bar.bottom() - (i + 1) * slice, kBarWidth, slice + 0.5}, scale.At(v));
  }
  canvas.Stroke({bar.x, bar.y, kBarWidth, bar.h}, kGrey, 0.8);
  const std::vector<double> ticks = NiceTicks(scale.lo, scale.hi, 6);
  double widest = 0;
  for (double t : ticks) {
    const double y = scale.hi > scale.lo
                         ? bar.bottom() - bar.h * (t - scale.lo) / (scale.hi - scale.lo)
                         : bar.bottom();
    const std::string text = TickText(t, TickStep(ticks));
    canvas.Line(bar.x + kBarWidth, y, bar.x + kBarWidth + 3, y, kBlack);
    canvas.Text(bar.x + kBarWidth + 4, y, text, TextStyle::Of(kTickSize));
    widest = std::max(widest, TextWidth(text, kTickSize));
  }
  canvas.Text(bar.x + kBarWidth + 4 + widest + 8 + kTickSize / 2, bar.y + bar.h / 2, scale.label,
              TextStyle::Of(kTickSize, Align::kCentre).Vertical());
}

}  // namespace mha::plot
