// plot::LatencyFigure (client/plot): every answer lands in one histogram bin (or is counted past
// the range when a straggler would squeeze the rest, and the figure says so), the throughput
// bins give the rate the answers arrived at, p50/p90/p99 are marked with their values, and the
// text is in the PDF.
#include "client/plot/latency_figure.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "plot_test_util.h"
#include "test_util.h"

namespace mha::testing {
namespace latency_figure_test {

using plot::LatencyFigure;
using plot::LatencySamples;

// n answers, 100 per second, latencies 1000, 1001, ... us.
LatencySamples Even(int n) {
  LatencySamples s;
  s.title = "bench: B=1 T=8";
  for (int i = 0; i < n; ++i) {
    s.latency_us.push_back(1000 + i);
    s.done_s.push_back((i + 0.5) / 100.0);
  }
  s.seconds = n / 100.0;
  s.p50_us = 1000 + n / 2;
  s.p90_us = 1000 + n * 9 / 10;
  s.p99_us = 1000 + n * 99 / 100;
  return s;
}

TEST(LatencyFigure, EveryAnswerIsInABinAndTheRateIsTheArrivals) {
  auto f = LatencyFigure::Make(Even(1000));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto& counts = f->counts();
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), 1000);
  EXPECT_EQ(f->beyond(), 0);
  EXPECT_DOUBLE_EQ(f->low_ms(), 1.0);
  EXPECT_EQ(counts.front(), 25);  // 40 bins over 999 us: 24.975 us each
  EXPECT_EQ(f->bin_s(), 0.5);     // 10 s in round bins of about a thirtieth
  ASSERT_EQ(f->rates().size(), 20u);
  for (double rate : f->rates()) EXPECT_DOUBLE_EQ(rate, 100.0);
  // 10.1 s: the last 0.1 s (under half a bin) joins the last bin, 0.6 s of 60 answers.
  auto longer = LatencyFigure::Make(Even(1010));
  ASSERT_TRUE(longer.ok()) << longer.status().ToString();
  ASSERT_EQ(longer->rates().size(), 20u);
  for (double rate : longer->rates()) EXPECT_NEAR(rate, 100.0, 1e-9);
}

TEST(LatencyFigure, AStragglerIsCountedPastTheRangeAndNamed) {
  LatencySamples s = Even(1000);
  s.latency_us.back() = 1e6;  // one answer took a second
  s.p99_us = 1990;
  auto f = LatencyFigure::Make(s);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->beyond(), 1);
  const auto& counts = f->counts();
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), 999);
  TempDir dir;
  auto file = plot::WriteFigures(dir.File("tail.png"), "--plot", {&*f});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  bool named = false;
  for (const auto& t : file->texts) named |= t.rfind("1 requests slower than 2.98 ms", 0) == 0;
  EXPECT_TRUE(named);
  const PngImage png = ReadPng(dir.File("tail.png"));
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_EQ(png.width, file->width);
  EXPECT_EQ(png.height, file->height);
}

TEST(LatencyFigure, PercentilesAreMarkedWithTheirValuesInTheFiles) {
  TempDir dir;
  LatencySamples s = Even(200);
  s.unit = "steps";
  auto f = LatencyFigure::Make(s);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto file = plot::WriteFigures(dir.File("latency.svg"), "--plot", {&*f});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto& t = file->texts;
  for (const char* want : {"p50 1.1 ms", "p90 1.18 ms", "p99 1.2 ms", "latency of 200 steps",
                           "latency (ms)", "steps/s", "mean 100 steps/s"}) {
    EXPECT_NE(std::find(t.begin(), t.end(), want), t.end()) << want;
  }
  if (!Python3().empty()) {
    const SvgSummary svg = ReadSvg(dir.File("latency.svg"));
    ASSERT_TRUE(svg.parsed) << svg.error;
    EXPECT_EQ(svg.glyph_uses, GlyphCount(t));
  }
  ASSERT_TRUE(plot::WriteFigures(dir.File("latency.pdf"), "--plot", {&*f}).ok());
  if (PdfToText().empty()) GTEST_SKIP() << "pdftotext not found at configure time";
  std::string error;
  const std::string text = PdfText(dir.File("latency.pdf"), &error);
  for (const char* want : {"p50 1.1 ms", "p99 1.2 ms", "throughput over the run"}) {
    EXPECT_TRUE(Contains(text, want)) << error;
  }
}

TEST(LatencyFigure, RefusesNoSamplesAndMismatchedTimes) {
  EXPECT_EQ(LatencyFigure::Make(LatencySamples{}).status().code(), StatusCode::kInvalidArgument);
  LatencySamples s = Even(10);
  s.done_s.pop_back();
  auto bad = LatencyFigure::Make(s);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "got 10 latencies and 9 times"));
}

}  // namespace latency_figure_test
}  // namespace mha::testing
