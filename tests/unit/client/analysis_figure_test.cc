// plot::AnalysisFigure (client/plot): the importance and rank bars carry their values, the
// correlation map has head labels on both axes and a labelled scale and colours known
// correlations as the diverging scale says (read back from the PNG), the figure grows with the
// heads, and the text is in the PDF.
#include "client/plot/analysis_figure.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "plot_test_util.h"
#include "test_util.h"

namespace mha::testing {
namespace analysis_figure_test {

using plot::AnalysisFigure;
using plot::HeadAnalysisData;

// H heads: head 0 half again as important as each of the others (1.5 / (H + 0.5) against
// 1 / (H + 0.5): values no axis tick has); correlation identity except heads 0 and 1 (-1).
HeadAnalysisData Heads(size_t h) {
  HeadAnalysisData d;
  d.title = "model test v1: W^O head analysis (E=16, H=" + std::to_string(h) + ", head_dim=4)";
  d.notes = {"importance: share of the norms"};
  d.importance.assign(h, 1.0 / (h + 0.5));
  d.importance[0] = 1.5 / (h + 0.5);
  d.effective_rank.assign(h, 3.5);
  d.max_rank = 4;
  d.correlation.assign(h * h, 0.0);
  for (size_t i = 0; i < h; ++i) d.correlation[i * h + i] = 1.0;
  if (h > 1) d.correlation[1] = d.correlation[h] = -1.0;
  return d;
}

size_t Count(const std::vector<std::string>& texts, const std::string& text) {
  return static_cast<size_t>(std::count(texts.begin(), texts.end(), text));
}

TEST(AnalysisFigure, BarsCarryTheirValuesAndTheMapItsHeadLabelsAndScale) {
  TempDir dir;
  auto f = AnalysisFigure::Make(Heads(4));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto file = plot::WriteFigures(dir.File("analysis.png"), "--plot", {&*f});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto& t = file->texts;
  EXPECT_EQ(Count(t, "model test v1: W^O head analysis (E=16, H=4, head_dim=4)"), 1u);
  EXPECT_EQ(Count(t, "0.333"), 1u);  // head 0's importance beside its bar
  EXPECT_EQ(Count(t, "0.222"), 3u);  // the others'
  EXPECT_EQ(Count(t, "3.5 / 4"), 4u);
  for (int h = 0; h < 4; ++h) {  // two bar charts, the map's rows and its columns
    EXPECT_EQ(Count(t, "h" + std::to_string(h)), 4u) << h;
  }
  EXPECT_EQ(Count(t, "Pearson correlation of the heads' W^O blocks"), 1u);
  EXPECT_EQ(Count(t, "head importance"), 1u);
  EXPECT_EQ(Count(t, "effective rank per head"), 1u);
  EXPECT_EQ(Count(t, "-1.00"), 2u);  // the values written in the map's cells
  const PngImage png = ReadPng(dir.File("analysis.png"));
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_EQ(png.width, file->width);
  const plot::Rect map = f->correlation_map();
  const double cell = map.w / 4;
  auto colour = [&](int i, int j) {  // a quarter into the cell: clear of the value written in it
    return png.At(map.x + (j + 0.25) * cell, map.y + (i + 0.25) * cell);
  };
  EXPECT_LE(ColourDistance(colour(2, 2), Bytes(plot::Diverging(1.0))), 2);
  EXPECT_LE(ColourDistance(colour(0, 1), Bytes(plot::Diverging(-1.0))), 2);
  EXPECT_LE(ColourDistance(colour(1, 0), Bytes(plot::Diverging(-1.0))), 2);
  EXPECT_LE(ColourDistance(colour(2, 3), Bytes(plot::Diverging(0.0))), 2);
}

TEST(AnalysisFigure, GrowsWithTheHeads) {
  auto four = AnalysisFigure::Make(Heads(4));
  auto sixteen = AnalysisFigure::Make(Heads(16));
  auto sixty_four = AnalysisFigure::Make(Heads(64));
  ASSERT_TRUE(four.ok() && sixteen.ok() && sixty_four.ok());
  EXPECT_GT(sixteen->height(), four->height());
  EXPECT_GT(sixty_four->height(), sixteen->height());
  EXPECT_GT(sixty_four->correlation_map().w, sixteen->correlation_map().w);
}

TEST(AnalysisFigure, TheTextIsInThePdf) {
  TempDir dir;
  auto f = AnalysisFigure::Make(Heads(8));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(plot::WriteFigures(dir.File("analysis.pdf"), "--plot", {&*f}).ok());
  if (PdfToText().empty()) GTEST_SKIP() << "pdftotext not found at configure time";
  std::string error;
  const std::string text = PdfText(dir.File("analysis.pdf"), &error);
  for (const char* want : {"W^O head analysis (E=16, H=8, head_dim=4)", "head importance",
                           "W^O head correlation", "h7", "3.5 / 4"}) {
    EXPECT_TRUE(Contains(text, want)) << error;
  }
}

TEST(AnalysisFigure, RefusesSizesThatDoNotMatch) {
  HeadAnalysisData d = Heads(3);
  d.correlation.pop_back();
  auto bad = AnalysisFigure::Make(d);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "got 3, 3 and 8"));
  d = Heads(3);
  d.effective_rank.pop_back();
  EXPECT_EQ(AnalysisFigure::Make(d).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AnalysisFigure::Make(HeadAnalysisData{}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace analysis_figure_test
}  // namespace mha::testing
