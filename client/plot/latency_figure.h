// A load run's latencies (`mha-client bench --plot`, `decode --plot`): their distribution as a
// histogram with p50, p90 and p99 marked and named with their values, and the throughput over
// the run (answers per second in time bins) with its mean.
#pragma once

#include <string>
#include <vector>

#include "client/plot/axes.h"
#include "client/plot/figure.h"

namespace mha::plot {

struct LatencySamples {
  std::string title;               // bold first line (what ran, against what)
  std::vector<std::string> notes;  // lines under it
  std::vector<double> latency_us;  // one per answered call
  std::vector<double> done_s;      // when each was answered, seconds since the run's start
  double p50_us = 0, p90_us = 0, p99_us = 0;  // the report's percentiles, marked as they are
  double seconds = 0;                         // the run's length
  std::string unit = "requests";              // what was answered: "requests", "steps"
};

class LatencyFigure : public Figure {
 public:
  // INVALID_ARGUMENT when there is no sample, or latencies and times differ in number.
  static StatusOr<LatencyFigure> Make(LatencySamples samples);

  double width() const override { return width_; }
  double height() const override { return height_; }
  void Draw(Canvas& canvas, double x, double y) const override;

  // The histogram: bins of equal width from low_ms (counts[i] answers in [low + i * w, low +
  // (i + 1) * w), the last bin closed), and how many were slower than its range (not drawn).
  const std::vector<int64_t>& counts() const { return counts_; }
  double low_ms() const { return low_ms_; }
  double bin_ms() const { return bin_ms_; }
  int64_t beyond() const { return beyond_; }
  // The throughput: answers per second in bins of bin_s from the start (the last bin ends with the
  // run: a rest shorter than half a bin widens it).
  const std::vector<double>& rates() const { return rates_; }
  double bin_s() const { return bin_s_; }

 private:
  LatencyFigure() = default;
  void Bin();
  void DrawHistogram(Canvas& canvas, const Rect& plot) const;
  void DrawThroughput(Canvas& canvas, const Rect& plot) const;

  LatencySamples in_;
  std::vector<std::string> header_;
  std::vector<int64_t> counts_;
  double low_ms_ = 0, bin_ms_ = 1, high_ms_ = 1;
  int64_t beyond_ = 0;
  std::vector<double> rates_;
  double seconds_ = 0, bin_s_ = 1, mean_rate_ = 0;
  Rect histogram_, throughput_;
  double width_ = 0, height_ = 0;
};

}  // namespace mha::plot
