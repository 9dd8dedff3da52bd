#include "client/plot/latency_figure.h"

#include <algorithm>
#include <cmath>

namespace mha::plot {
namespace {

constexpr double kPlotW = 400, kPlotH = 220, kPlotSpacing = 40;
constexpr int kBins = 40;
// The histogram stops at 1.5 x p99 when the slowest answer is further out than 3 x p99: a few
// stragglers would otherwise squeeze the distribution into its first bins.
constexpr double kTailCut = 3.0, kTailShown = 1.5;

struct Mark {
  const char* name;
  double us;
  Rgb colour;
};

// The time bin: a round step giving about 30 bins over the run.
double TimeBin(double seconds) {
  const std::vector<double> ticks = NiceTicks(0, std::max(seconds, 0.01), 31);
  return std::max(ticks.size() > 1 ? ticks[1] - ticks[0] : seconds, 0.005);
}

}  // namespace

StatusOr<LatencyFigure> LatencyFigure::Make(LatencySamples samples) {
  if (samples.latency_us.empty() || samples.latency_us.size() != samples.done_s.size()) {
    return InvalidArgument(
        "latency figure: need one answer time per latency and at least one, "
        "got " +
        std::to_string(samples.latency_us.size()) + " latencies and " +
        std::to_string(samples.done_s.size()) + " times");
  }
  LatencyFigure f;
  f.in_ = std::move(samples);
  f.Bin();
  f.header_ = {f.in_.title};
  f.header_.insert(f.header_.end(), f.in_.notes.begin(), f.in_.notes.end());
  if (f.beyond_ > 0) {
    f.header_.push_back(std::to_string(f.beyond_) + " " + f.in_.unit + " slower than " +
                        ValueText(f.high_ms_) + " ms (> " + ValueText(kTailCut) +
                        " x p99) are counted but beyond the histogram's range");
  }
  const double top = kMargin + kTitleLine + kNoteLine * (f.header_.size() - 1) + 8 + kPanelTitle;
  const double axis_w = ValueAxisWidth(0, 100000);  // room for the widest count or rate
  f.histogram_ = {kMargin + axis_w, top, kPlotW, kPlotH};
  f.throughput_ = {f.histogram_.right() + kPlotSpacing + axis_w, top, kPlotW, kPlotH};
  f.width_ = f.throughput_.right() + kMargin;
  for (size_t i = 0; i < f.header_.size(); ++i) {
    f.width_ = std::max(f.width_,
                        2 * kMargin + TextWidth(f.header_[i], i ? kSubtitleFont : kTitleFont, !i));
  }
  f.height_ = top + kPlotH + kBottomAxisHeight + kMargin;
  return f;
}

void LatencyFigure::Bin() {
  const auto [lo, hi] = std::minmax_element(in_.latency_us.begin(), in_.latency_us.end());
  low_ms_ = *lo / 1e3;
  high_ms_ = *hi / 1e3;
  if (in_.p99_us > 0 && *hi > kTailCut * in_.p99_us) high_ms_ = kTailShown * in_.p99_us / 1e3;
  if (high_ms_ <= low_ms_) high_ms_ = low_ms_ + std::max(1e-3, low_ms_ * 0.01);
  bin_ms_ = (high_ms_ - low_ms_) / kBins;
  counts_.assign(kBins, 0);
  for (double us : in_.latency_us) {
    const double ms = us / 1e3;
    if (ms > high_ms_) {
      ++beyond_;
      continue;
    }
    counts_[std::min<size_t>(static_cast<size_t>((ms - low_ms_) / bin_ms_), kBins - 1)] += 1;
  }
  seconds_ = std::max(in_.seconds, *std::max_element(in_.done_s.begin(), in_.done_s.end()));
  bin_s_ = TimeBin(seconds_);
  // Whole bins; a rest of at least half a bin is a bin of its own, a shorter one joins the last
  // (a rate over a sliver of time would be mostly noise).
  size_t bins = std::max<size_t>(1, static_cast<size_t>(std::floor(seconds_ / bin_s_ + 1e-9)));
  if (seconds_ - bins * bin_s_ >= bin_s_ / 2) ++bins;
  std::vector<int64_t> done(bins, 0);
  for (double t : in_.done_s) {
    done[std::min(bins - 1, static_cast<size_t>(std::max(t, 0.0) / bin_s_))] += 1;
  }
  for (size_t i = 0; i < bins; ++i) {
    const double width = i + 1 < bins ? bin_s_ : seconds_ - i * bin_s_;
    rates_.push_back(width > 0 ? done[i] / width : 0.0);
  }
  mean_rate_ = seconds_ > 0 ? in_.done_s.size() / seconds_ : 0.0;
}

void LatencyFigure::DrawHistogram(Canvas& canvas, const Rect& plot) const {
  canvas.Text(plot.x, plot.y - kPanelTitle / 2,
              "latency of " + std::to_string(in_.latency_us.size()) + " " + in_.unit,
              TextStyle::Of(kPanelFont).Bold());
  const int64_t most = std::max<int64_t>(1, *std::max_element(counts_.begin(), counts_.end()));
  const double high = most * 1.1;
  DrawValueAxis(canvas, plot, 0, high, in_.unit + " per bin");
  const double w = plot.w / kBins;
  for (int i = 0; i < kBins; ++i) {
    const double h = plot.h * counts_[i] / high;
    canvas.Fill({plot.x + i * w + 0.5, plot.bottom() - h, w - 1, h}, Viridis(0.35));
  }
  DrawBottomAxis(canvas, plot, low_ms_, high_ms_, "latency (ms)");
  const Mark marks[] = {{"p50", in_.p50_us, {0.13, 0.40, 0.67}},
                        {"p90", in_.p90_us, {0.90, 0.55, 0.10}},
                        {"p99", in_.p99_us, {0.75, 0.10, 0.15}}};
  double legend_x = plot.right();  // the marks' values, right-aligned on the title's line
  for (auto m = std::rbegin(marks); m != std::rend(marks); ++m) {
    const double ms = m->us / 1e3;
    const double x = plot.x + plot.w * std::clamp((ms - low_ms_) / (high_ms_ - low_ms_), 0.0, 1.0);
    canvas.Line(x, plot.y, x, plot.bottom(), m->colour, 1.5, true);
    const std::string text = std::string(m->name) + " " + ValueText(ms) + " ms";
    canvas.Text(legend_x, plot.y - kPanelTitle / 2, text,
                TextStyle::Of(kTickFont, Align::kEnd).Bold().Colour(m->colour));
    legend_x -= TextWidth(text, kTickFont, true) + 12;
  }
}

void LatencyFigure::DrawThroughput(Canvas& canvas, const Rect& plot) const {
  canvas.Text(plot.x, plot.y - kPanelTitle / 2, "throughput over the run",
              TextStyle::Of(kPanelFont).Bold());
  const double most = std::max(1e-9, *std::max_element(rates_.begin(), rates_.end()));
  const double high = most * 1.15;
  DrawValueAxis(canvas, plot, 0, high, in_.unit + "/s");
  const double unit = plot.w / seconds_;  // per second
  for (size_t i = 0; i < rates_.size(); ++i) {
    const double from = i * bin_s_, to = i + 1 < rates_.size() ? from + bin_s_ : seconds_;
    const double h = plot.h * rates_[i] / high;
    canvas.Fill(
        {plot.x + from * unit + 0.5, plot.bottom() - h, std::max((to - from) * unit - 1, 0.5), h},
        Viridis(0.6));
  }
  DrawBottomAxis(canvas, plot, 0, seconds_,
                 "time since the start (s), bins of " + ValueText(bin_s_) + " s");
  const double y = plot.bottom() - plot.h * mean_rate_ / high;
  canvas.Line(plot.x, y, plot.right(), y, kBlack, 1.2, true);
  canvas.Text(plot.right() - 4, y - 8, "mean " + ValueText(mean_rate_) + " " + in_.unit + "/s",
              TextStyle::Of(kTickFont, Align::kEnd).Bold());
}

void LatencyFigure::Draw(Canvas& canvas, double x, double y) const {
  double at = y + kMargin + kTitleFont / 2;
  canvas.Text(x + kMargin, at, header_[0], TextStyle::Of(kTitleFont).Bold());
  at += kTitleLine / 2 + kNoteLine / 2;
  for (size_t i = 1; i < header_.size(); ++i, at += kNoteLine) {
    canvas.Text(x + kMargin, at, header_[i], TextStyle::Of(kSubtitleFont));
  }
  Rect h = histogram_, t = throughput_;
  h.x += x;
  h.y += y;
  t.x += x;
  t.y += y;
  DrawHistogram(canvas, h);
  DrawThroughput(canvas, t);
}

}  // namespace mha::plot
