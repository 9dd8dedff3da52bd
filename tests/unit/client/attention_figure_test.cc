// plot::AttentionFigure (client/plot): a one-hot pattern lights exactly the expected cells (read
// back from the PNG at each cell's centre), masked positions and masked heads are hatched grey,
// the figure grows with the heads and keys, a long sequence is a max-pooled view that keeps its
// peak and says so, and the title, head names and axis labels are in the SVG and PDF files.
#include "client/plot/attention_figure.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "plot_test_util.h"
#include "test_util.h"

namespace mha::testing {
namespace attention_figure_test {

using plot::AttentionFigure;
using plot::AttentionMaps;

// `heads` panels of rows x keys, all zero.
AttentionMaps Zeros(int64_t heads, int64_t rows, int64_t keys) {
  AttentionMaps m;
  m.title = "model test v1: attention weights, batch row 0 of 1";
  m.notes = {"per head"};
  m.rows = rows;
  m.keys = keys;
  for (int64_t h = 0; h < heads; ++h) m.panels.push_back("head " + std::to_string(h));
  m.weights.assign(static_cast<size_t>(heads * rows * keys), 0.0f);
  return m;
}

float& At(AttentionMaps& m, int64_t panel, int64_t row, int64_t key) {
  return m.weights[static_cast<size_t>((panel * m.rows + row) * m.keys + key)];
}

// The PNG's colour at shown cell (row, col) of `panel`.
std::array<int, 3> Cell(const PngImage& png, const AttentionFigure& f, size_t panel, int64_t row,
                        int64_t col) {
  double x = 0, y = 0;
  f.CellCentre(panel, row, col, &x, &y);
  return png.At(x, y);
}

bool Grey(const std::array<int, 3>& c) { return c[0] == c[1] && c[1] == c[2]; }

TEST(AttentionFigure, AOneHotPatternLightsTheExpectedCells) {
  TempDir dir;
  AttentionMaps m = Zeros(2, 4, 6);
  for (int64_t r = 0; r < 4; ++r) At(m, 0, r, (r + 1) % 6) = 1.0f;  // head 0: one key per row
  for (int64_t r = 0; r < 4; ++r) At(m, 1, r, 5 - r) = 0.5f;        // head 1: the anti-diagonal
  auto f = AttentionFigure::Make(m);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->row_factor(), 1);
  EXPECT_EQ(f->key_factor(), 1);
  EXPECT_EQ(f->scale_high(), 1.0);
  ASSERT_TRUE(plot::WriteFigures(dir.File("one_hot.png"), "--plot", {&*f}).ok());
  const PngImage png = ReadPng(dir.File("one_hot.png"));
  ASSERT_TRUE(png.ok) << png.error;
  const auto on = Bytes(plot::Viridis(1.0)), half = Bytes(plot::Viridis(0.5)),
             off = Bytes(plot::Viridis(0.0));
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t k = 0; k < 6; ++k) {
      SCOPED_TRACE("row " + std::to_string(r) + " key " + std::to_string(k));
      EXPECT_LE(ColourDistance(Cell(png, *f, 0, r, k), k == (r + 1) % 6 ? on : off), 2);
      EXPECT_LE(ColourDistance(Cell(png, *f, 1, r, k), k == 5 - r ? half : off), 2);
    }
  }
}

TEST(AttentionFigure, MaskedPositionsAndMaskedHeadsAreHatchedAndNamed) {
  TempDir dir;
  AttentionMaps m = Zeros(3, 4, 4);
  m.masked.assign(16, 0);
  for (int64_t q = 0; q < 4; ++q) {
    for (int64_t k = 0; k <= q; ++k) At(m, 0, q, k) = At(m, 2, q, k) = 1.0f / (q + 1);
    for (int64_t k = q + 1; k < 4; ++k) m.masked[static_cast<size_t>(q * 4 + k)] = 1;  // causal
  }
  m.panel_masked = {0, 1, 0};
  m.masked_legend = "masked position (is_causal)";
  m.panel_masked_legend = "head dropped by head_mask 0";
  auto f = AttentionFigure::Make(m);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto file = plot::WriteFigures(dir.File("masked.png"), "--plot", {&*f});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const PngImage png = ReadPng(dir.File("masked.png"));
  ASSERT_TRUE(png.ok) << png.error;
  for (int64_t q = 0; q < 4; ++q) {
    for (int64_t k = 0; k < 4; ++k) {
      SCOPED_TRACE("query " + std::to_string(q) + " key " + std::to_string(k));
      EXPECT_EQ(Grey(Cell(png, *f, 0, q, k)), k > q);  // hatched exactly where masked
      EXPECT_TRUE(Grey(Cell(png, *f, 1, q, k)));       // the whole dropped head
      if (k <= q) {
        EXPECT_LE(ColourDistance(Cell(png, *f, 2, q, k), Bytes(plot::Viridis(1.0 / (q + 1)))), 2);
      }
    }
  }
  const auto& t = file->texts;
  EXPECT_NE(std::find(t.begin(), t.end(), "masked position (is_causal)"), t.end());
  EXPECT_NE(std::find(t.begin(), t.end(), "head dropped by head_mask 0"), t.end());
}

TEST(AttentionFigure, GrowsWithHeadsAndKeys) {
  auto two = AttentionFigure::Make(Zeros(2, 8, 8));
  auto eight = AttentionFigure::Make(Zeros(8, 8, 8));
  auto sixteen = AttentionFigure::Make(Zeros(16, 8, 8));
  auto wide = AttentionFigure::Make(Zeros(2, 8, 24));
  ASSERT_TRUE(two.ok() && eight.ok() && sixteen.ok() && wide.ok());
  EXPECT_GT(eight->width(), two->width());  // up to four panels side by side
  EXPECT_GT(sixteen->height(), eight->height());
  EXPECT_GT(eight->height(), two->height());  // a second row of panels
  EXPECT_GT(wide->map(0).w, two->map(0).w);
  EXPECT_EQ(wide->map(0).h, two->map(0).h);
}

TEST(AttentionFigure, ALongSequenceIsAMaxPooledViewThatKeepsItsPeakAndSaysSo) {
  TempDir dir;
  AttentionMaps m = Zeros(1, 300, 300);
  At(m, 0, 299, 299) = 0.25f;  // one peak in the last corner
  At(m, 0, 0, 0) = 0.125f;
  auto f = AttentionFigure::Make(m);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->row_factor(), 5);  // ceil(300 / 64)
  EXPECT_EQ(f->key_factor(), 5);
  EXPECT_EQ(f->shown_rows(), 60);
  auto file = plot::WriteFigures(dir.File("long.png"), "--plot", {&*f});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const PngImage png = ReadPng(dir.File("long.png"));
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_LE(ColourDistance(Cell(png, *f, 0, 59, 59), Bytes(plot::Viridis(1.0))), 2);
  EXPECT_LE(ColourDistance(Cell(png, *f, 0, 0, 0), Bytes(plot::Viridis(0.5))), 2);
  EXPECT_LE(ColourDistance(Cell(png, *f, 0, 30, 30), Bytes(plot::Viridis(0.0))), 2);
  bool said = false;
  for (const auto& text : file->texts) said |= text.find("max-pooled view of 300 x 300") == 0;
  EXPECT_TRUE(said);
  // Labels are the blocks' first positions: key 250 is block 50's.
  EXPECT_NE(std::find(file->texts.begin(), file->texts.end(), "250"), file->texts.end());
}

TEST(AttentionFigure, TitleHeadNamesAndAxesAreInTheSvgAndPdf) {
  TempDir dir;
  AttentionMaps m = Zeros(3, 5, 7);
  m.first_row = 10;  // weights_query_begin: the rows are positions 10..14
  auto f = AttentionFigure::Make(m);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto svg_file = plot::WriteFigures(dir.File("maps.svg"), "--plot", {&*f});
  ASSERT_TRUE(svg_file.ok()) << svg_file.status().ToString();
  const auto& t = svg_file->texts;
  for (const char* want : {"model test v1: attention weights, batch row 0 of 1", "head 0", "head 2",
                           "query position", "key position", "attention weight", "10", "14", "6"}) {
    EXPECT_NE(std::find(t.begin(), t.end(), want), t.end()) << want;
  }
  if (!Python3().empty()) {
    const SvgSummary svg = ReadSvg(dir.File("maps.svg"));
    ASSERT_TRUE(svg.parsed) << svg.error;
    EXPECT_EQ(svg.glyph_uses, GlyphCount(t));
    EXPECT_EQ(svg.width, svg_file->width);
  }
  auto pdf_file = plot::WriteFigures(dir.File("maps.pdf"), "--plot", {&*f});
  ASSERT_TRUE(pdf_file.ok()) << pdf_file.status().ToString();
  if (PdfToText().empty()) GTEST_SKIP() << "pdftotext not found at configure time";
  std::string error;
  const std::string text = PdfText(dir.File("maps.pdf"), &error);
  for (const char* want : {"attention weights, batch row 0 of 1", "head 1", "query position"}) {
    EXPECT_TRUE(Contains(text, want)) << error;
  }
}

TEST(AttentionFigure, RefusesShapesThatDoNotMatch) {
  AttentionMaps m = Zeros(2, 3, 4);
  m.weights.pop_back();
  auto short_weights = AttentionFigure::Make(m);
  EXPECT_EQ(short_weights.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(short_weights.status().message(), "23 weights for 2 panels of 3x4"));
  m = Zeros(2, 3, 4);
  m.masked.assign(5, 0);
  EXPECT_EQ(AttentionFigure::Make(m).status().code(), StatusCode::kInvalidArgument);
  m = Zeros(2, 3, 4);
  m.row_names = {"a"};
  EXPECT_EQ(AttentionFigure::Make(m).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionFigure::Make(Zeros(0, 3, 4)).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace attention_figure_test
}  // namespace mha::testing
