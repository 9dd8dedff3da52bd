// plot::Canvas and WriteFigures (client/plot): the format follows the extension (others are
// refused, naming the flag and the choices); each format writes a file its own reader accepts,
// of the asked size; the text drawn is in the file (PDF: pdftotext finds it; SVG: one glyph per
// character recorded; PNG: dark pixels where it was drawn, none elsewhere); fills keep their
// colour; unwritable paths are INTERNAL errors naming the path.
#include "client/plot/canvas.h"

#include <gtest/gtest.h>

#include "client/plot/colour.h"
#include "client/plot/figure.h"
#include "plot_test_util.h"
#include "test_util.h"

namespace mha::testing {
namespace canvas_test {

using plot::Canvas;
using plot::ImageFormat;

TEST(PlotFormat, FollowsTheExtensionAndRefusesOthersNamingTheFlag) {
  EXPECT_EQ(plot::FormatOfPath("a/b.png", "--plot").value(), ImageFormat::kPng);
  EXPECT_EQ(plot::FormatOfPath("B.PNG", "--plot").value(), ImageFormat::kPng);
  EXPECT_EQ(plot::FormatOfPath("x.svg", "--plot").value(), ImageFormat::kSvg);
  EXPECT_EQ(plot::FormatOfPath("x.Pdf", "--plot").value(), ImageFormat::kPdf);
  auto jpg = plot::FormatOfPath("maps.jpg", "--plot");
  ASSERT_FALSE(jpg.ok());
  EXPECT_EQ(jpg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(jpg.status().message(), "--plot: 'maps.jpg' has extension '.jpg'"));
  EXPECT_TRUE(Contains(jpg.status().message(), ".png, .svg or .pdf"));
  auto none = plot::FormatOfPath("v1.2/maps", "--plot");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "has no extension"));
}

// Draws two texts and a filled square on a 300 x 120 canvas of `name`'s format.
StatusOr<std::vector<std::string>> DrawSample(const std::string& path) {
  auto canvas = Canvas::Create(path, "--plot", 300, 120);
  if (!canvas.ok()) return canvas.status();
  Canvas& c = **canvas;
  c.Text(10, 20, "attention weights", plot::TextStyle::Of(14).Bold());
  c.Text(10, 50, "head 3 query position", plot::TextStyle::Of(10));
  c.Fill({200, 40, 60, 60}, plot::Viridis(1.0));
  c.Hatch({200, 0, 60, 30});
  MHA_RETURN_IF_ERROR(c.Finish());
  return c.texts();
}

TEST(Canvas, PngIsReadBackOfTheAskedSizeWithItsTextAndColours) {
  TempDir dir;
  auto texts = DrawSample(dir.File("a.png"));
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  EXPECT_EQ(*texts, (std::vector<std::string>{"attention weights", "head 3 query position"}));
  const PngImage png = ReadPng(dir.File("a.png"));
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_EQ(png.width, 300);
  EXPECT_EQ(png.height, 120);
  EXPECT_LE(ColourDistance(png.At(230, 70), Bytes(plot::Viridis(1.0))), 1);
  int dark_in_text = 0, dark_elsewhere = 0;
  for (int y = 0; y < 120; ++y) {
    for (int x = 0; x < 190; ++x) {
      const bool dark = png.At(x, y)[0] < 100;
      (y < 60 ? dark_in_text : dark_elsewhere) += dark;
    }
  }
  EXPECT_GT(dark_in_text, 100);  // anti-aliased glyphs: many dark pixels where the text is
  EXPECT_EQ(dark_elsewhere, 0);
}

TEST(Canvas, SvgIsWellFormedXmlWithOneGlyphPerCharacterDrawn) {
  if (Python3().empty()) GTEST_SKIP() << "python3 not found at configure time";
  TempDir dir;
  auto texts = DrawSample(dir.File("a.svg"));
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  const SvgSummary svg = ReadSvg(dir.File("a.svg"));
  ASSERT_TRUE(svg.parsed) << svg.error;
  EXPECT_EQ(svg.width, 300);
  EXPECT_EQ(svg.height, 120);
  // cairo writes text as glyph outlines (<symbol>) placed by <use>, one per character.
  EXPECT_EQ(svg.glyph_uses, GlyphCount(*texts));
  EXPECT_EQ(svg.glyph_uses, 17 + 21);
}

TEST(Canvas, PdfHasItsHeaderTrailerPageSizeAndText) {
  TempDir dir;
  auto texts = DrawSample(dir.File("a.pdf"));
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  const std::string bytes = ReadFileBytes(dir.File("a.pdf"));
  EXPECT_EQ(bytes.substr(0, 5), "%PDF-");
  EXPECT_NE(bytes.find("%%EOF", bytes.size() - 16), std::string::npos);
  if (PdfToText().empty() || PdfInfo().empty()) {
    GTEST_SKIP() << "poppler-utils (pdftotext, pdfinfo) not found at configure time";
  }
  std::string error;
  const std::string text = PdfText(dir.File("a.pdf"), &error);
  EXPECT_TRUE(Contains(text, "attention weights")) << error;
  EXPECT_TRUE(Contains(text, "head 3 query position")) << error;
  double w = 0, h = 0;
  ASSERT_TRUE(PdfPageSize(dir.File("a.pdf"), &w, &h, &error)) << error;
  EXPECT_EQ(w, 300);
  EXPECT_EQ(h, 120);
}

TEST(Canvas, BadSizesAndUnwritablePathsAreRefused) {
  TempDir dir;
  auto zero = Canvas::Create(dir.File("a.png"), "--plot", 0, 10);
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  auto svg = Canvas::Create(dir.File("no/such/a.svg"), "--plot", 10, 10);
  EXPECT_EQ(svg.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(Contains(svg.status().message(), "no/such/a.svg"));
  auto png = Canvas::Create(dir.File("no/such/a.png"), "--plot", 10, 10);
  ASSERT_TRUE(png.ok());  // a PNG is written at the end
  const Status finished = (*png)->Finish();
  EXPECT_EQ(finished.code(), StatusCode::kInternal);
  EXPECT_TRUE(Contains(finished.message(), "no/such/a.png"));
}

// A figure of a fixed size that writes one text.
class Box : public plot::Figure {
 public:
  Box(double w, double h, std::string text) : w_(w), h_(h), text_(std::move(text)) {}
  double width() const override { return w_; }
  double height() const override { return h_; }
  void Draw(Canvas& canvas, double x, double y) const override {
    canvas.Text(x + 2, y + h_ / 2, text_);
  }

 private:
  double w_, h_;
  std::string text_;
};

TEST(WriteFigures, StacksFiguresTopToBottomInOneFile) {
  TempDir dir;
  const Box a(200, 50, "first"), b(120.5, 40, "second");
  auto file = plot::WriteFigures(dir.File("two.png"), "--plot", {&a, &b});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->width, 200);
  EXPECT_EQ(file->height, 90);
  EXPECT_EQ(file->texts, (std::vector<std::string>{"first", "second"}));
  const PngImage png = ReadPng(dir.File("two.png"));
  ASSERT_TRUE(png.ok) << png.error;
  EXPECT_EQ(png.height, 90);
  EXPECT_EQ(plot::WriteFigures(dir.File("none.png"), "--plot", {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(plot::WriteFigures(dir.File("a.gif"), "--plot", {&a}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace canvas_test
}  // namespace mha::testing
