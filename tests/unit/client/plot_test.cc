// mha-client's pictures (client/plot): written PNGs read back with libpng — a valid PNG of the
// layout's size, and the pixels of known weights in the colours of the scale.
#include "client/plot/plot.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <png.h>

#include <vector>

#include "test_util.h"

namespace mha::testing {
namespace plot_test {

struct Png {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::array<uint8_t, 3> At(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * width + x) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

// libpng's reader: false when the file is not a PNG it can decode.
bool ReadPng(const std::string& path, Png* out) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) return false;
  image.format = PNG_FORMAT_RGB;
  out->width = static_cast<int>(image.width);
  out->height = static_cast<int>(image.height);
  out->rgb.resize(PNG_IMAGE_SIZE(image));
  return png_image_finish_read(&image, nullptr, out->rgb.data(), 0, nullptr) != 0;
}

TEST(Plot, WeightsGridIsAPngOfTheLayoutWithTheScalesColours) {
  TempDir dir;
  // Two heads of 4x6 weights: head 0 one-hot on the diagonal, head 1 uniform 1/6.
  at::Tensor w = at::zeros({2, 4, 6});
  for (int64_t r = 0; r < 4; ++r) w[0][r][r] = 1.0;
  w[1].fill_(1.0 / 6);
  auto layout = plot::PlotWeights(w, {3, 1}, dir.File("w.png"));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->panels, 2);
  EXPECT_EQ(layout->panel_w, 6 * layout->cell);
  EXPECT_EQ(layout->panel_h, 4 * layout->cell);
  Png png;
  ASSERT_TRUE(ReadPng(dir.File("w.png"), &png));
  EXPECT_EQ(png.width, layout->width);
  EXPECT_EQ(png.height, layout->height);
  EXPECT_GE(png.width, 2 * layout->panel_w);
  auto centre = [&](int panel, int row, int col) {
    return png.At(layout->origin_x(panel) + col * layout->cell + layout->cell / 2,
                  layout->origin_y(panel) + row * layout->cell + layout->cell / 2);
  };
  EXPECT_EQ(centre(0, 2, 2), plot::ColourOf(1.0));  // the largest weight: top of the scale
  EXPECT_EQ(centre(0, 2, 3), plot::ColourOf(0.0));
  EXPECT_EQ(centre(1, 3, 5), plot::ColourOf(1.0 / 6));
  EXPECT_NE(plot::ColourOf(0.0), plot::ColourOf(1.0));
}

TEST(Plot, BigPanelsArePooledAndKeepTheirPeaks) {
  TempDir dir;
  at::Tensor w = at::zeros({1, 1000, 2048});
  w[0][999][2047] = 0.5;  // one peak in the last corner survives max-pooling
  auto layout = plot::PlotWeights(w, {}, dir.File("big.png"));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_LE(layout->panel_w, 240);
  EXPECT_LE(layout->panel_h, 240);
  Png png;
  ASSERT_TRUE(ReadPng(dir.File("big.png"), &png));
  EXPECT_EQ(png.width, layout->width);
  EXPECT_EQ(png.height, layout->height);
  EXPECT_EQ(
      png.At(layout->origin_x(0) + layout->panel_w - 1, layout->origin_y(0) + layout->panel_h - 1),
      plot::ColourOf(1.0));
  EXPECT_EQ(png.At(layout->origin_x(0), layout->origin_y(0)), plot::ColourOf(0.0));
}

TEST(Plot, AnalysisIsAPngAndBadInputIsRefused) {
  TempDir dir;
  ASSERT_TRUE(
      plot::PlotAnalysis({0.5, 0.25, 0.25}, std::vector<double>(9, 0.1), dir.File("a.png")).ok());
  Png png;
  ASSERT_TRUE(ReadPng(dir.File("a.png"), &png));
  EXPECT_GT(png.width, 200);
  EXPECT_FALSE(plot::PlotAnalysis({0.5, 0.5}, {1.0}, dir.File("b.png")).ok());
  EXPECT_FALSE(plot::PlotWeights(at::zeros({4, 4}), {}, dir.File("c.png")).ok());
  EXPECT_FALSE(plot::PlotWeights(at::zeros({1, 2, 2}), {}, dir.File("no/such/dir.png")).ok());
}

}  // namespace plot_test
}  // namespace mha::testing
