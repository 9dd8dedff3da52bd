#include "client/plot/plot.h"

#include <ATen/ATen.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

namespace mha::plot {
namespace {

constexpr int kMaxPanel = 240, kMaxCell = 48, kPad = 24, kTextScale = 2;
constexpr std::array<uint8_t, 3> kWhite{255, 255, 255}, kBlack{0, 0, 0};

// 3x5 glyphs, one row of 3 bits per entry (MSB left).
const std::map<char, std::array<uint8_t, 5>>& Glyphs() {
  static const std::map<char, std::array<uint8_t, 5>> glyphs = {
      {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}},
      {'3', {7, 1, 7, 1, 7}}, {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}},
      {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}}, {'8', {7, 5, 7, 5, 7}},
      {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
      {'+', {0, 2, 7, 2, 0}}, {'e', {7, 5, 7, 4, 7}}, {'h', {4, 4, 7, 5, 5}},
      {':', {0, 2, 0, 2, 0}}};
  return glyphs;
}

std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", v);
  return text;
}

// Vertical colour scale from `low` (bottom) to `high` (top), labelled at both ends.
void ColourScale(Image* image, int x, int y, int h, double low, double high) {
  for (int i = 0; i < h; ++i) {
    image->Fill(x, y + i, 12, 1, ColourOf(1.0 - static_cast<double>(i) / std::max(1, h - 1)));
  }
  image->Text(x + 16, y, Number(high), kTextScale, kBlack);
  image->Text(x + 16, y + h - 5 * kTextScale, Number(low), kTextScale, kBlack);
}

}  // namespace

Image::Image(int w, int h) : width(w), height(h), rgb(static_cast<size_t>(w) * h * 3, 255) {}

void Image::Fill(int x, int y, int w, int h, const std::array<uint8_t, 3>& c) {
  for (int yy = std::max(0, y); yy < std::min(height, y + h); ++yy) {
    for (int xx = std::max(0, x); xx < std::min(width, x + w); ++xx) {
      std::copy(c.begin(), c.end(), rgb.begin() + (static_cast<size_t>(yy) * width + xx) * 3);
    }
  }
}

void Image::Text(int x, int y, const std::string& text, int scale,
                 const std::array<uint8_t, 3>& c) {
  for (char ch : text) {
    const auto it = Glyphs().find(ch);
    if (it != Glyphs().end()) {
      for (int row = 0; row < 5; ++row) {
        for (int bit = 0; bit < 3; ++bit) {
          if (it->second[row] & (4 >> bit)) Fill(x + bit * scale, y + row * scale, scale, scale, c);
        }
      }
    }
    x += 4 * scale;
  }
}

std::array<uint8_t, 3> Image::At(int x, int y) const {
  const size_t i = (static_cast<size_t>(y) * width + x) * 3;
  return {rgb[i], rgb[i + 1], rgb[i + 2]};
}

std::array<uint8_t, 3> ColourOf(double v) {
  if (std::isnan(v)) return {128, 128, 128};
  // Five anchors of matplotlib's viridis, linearly interpolated.
  static constexpr std::array<std::array<double, 3>, 5> kAnchors = {
      {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  const double t = std::clamp(v, 0.0, 1.0) * (kAnchors.size() - 1);
  const size_t i = std::min(static_cast<size_t>(t), kAnchors.size() - 2);
  const double f = t - static_cast<double>(i);
  std::array<uint8_t, 3> c{};
  for (int k = 0; k < 3; ++k) {
    c[k] = static_cast<uint8_t>(std::lround(kAnchors[i][k] * (1 - f) + kAnchors[i + 1][k] * f));
  }
  return c;
}

Status WritePng(const Image& image, const std::string& path) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&png, path.c_str(), 0, image.rgb.data(), 0, nullptr)) {
    return Internal(path + ": cannot write PNG (" + png.message + ")");
  }
  return Status::Ok();
}

int GridLayout::origin_x(int p) const { return kPad + (p % columns) * (panel_w + kPad); }
int GridLayout::origin_y(int p) const { return 2 * kPad + (p / columns) * (panel_h + 2 * kPad); }

GridLayout LayoutGrid(int panels, int64_t rows, int64_t keys) {
  GridLayout g;
  g.panels = panels;
  g.columns = std::min(panels, 4);
  const int64_t pooled_r = std::min<int64_t>(rows, kMaxPanel);
  const int64_t pooled_c = std::min<int64_t>(keys, kMaxPanel);
  g.cell =
      static_cast<int>(std::clamp<int64_t>(kMaxPanel / std::max(pooled_r, pooled_c), 1, kMaxCell));
  g.panel_w = static_cast<int>(pooled_c) * g.cell;
  g.panel_h = static_cast<int>(pooled_r) * g.cell;
  const int grid_rows = (panels + g.columns - 1) / g.columns;
  g.width = kPad + g.columns * (g.panel_w + kPad) + 80;  // + the colour scale and its labels
  g.height = 2 * kPad + grid_rows * (g.panel_h + 2 * kPad);
  return g;
}

StatusOr<GridLayout> PlotWeights(const at::Tensor& weights, const std::vector<int64_t>& labels,
                                 const std::string& path) {
  if (weights.dim() != 3 || weights.numel() == 0) {
    return InvalidArgument("--plot: weights must be [panels, rows, keys]");
  }
  const int panels = static_cast<int>(weights.size(0));
  const GridLayout g = LayoutGrid(panels, weights.size(1), weights.size(2));
  at::Tensor w = weights.to(at::kFloat).nan_to_num(0.0);
  const int64_t ph = g.panel_h / g.cell, pw = g.panel_w / g.cell;
  if (ph != w.size(1) || pw != w.size(2)) {  // max-pooled so that peaks stay visible
    w = std::get<0>(at::adaptive_max_pool2d(w.unsqueeze(1), {ph, pw})).squeeze(1);
  }
  const double high = std::max(weights.to(at::kDouble).nan_to_num(0.0).max().item<double>(), 1e-30);
  w = (w.to(at::kDouble) / high).contiguous();
  const double* v = w.data_ptr<double>();
  Image image(g.width, g.height);
  for (int p = 0; p < panels; ++p) {
    const int x0 = g.origin_x(p), y0 = g.origin_y(p);
    if (p < static_cast<int>(labels.size())) {  // untitled when averaged over the heads
      image.Text(x0, y0 - 6 * kTextScale - 2, "h" + std::to_string(labels[p]), kTextScale, kBlack);
    }
    for (int64_t r = 0; r < ph; ++r) {
      for (int64_t c = 0; c < pw; ++c) {
        image.Fill(x0 + static_cast<int>(c) * g.cell, y0 + static_cast<int>(r) * g.cell, g.cell,
                   g.cell, ColourOf(v[(p * ph + r) * pw + c]));
      }
    }
  }
  ColourScale(&image, g.width - 72, 2 * kPad, std::max(g.panel_h, 60), 0.0, high);
  MHA_RETURN_IF_ERROR(WritePng(image, path));
  return g;
}

Status PlotAnalysis(const std::vector<double>& importance, const std::vector<double>& correlation,
                    const std::string& path) {
  const int heads = static_cast<int>(importance.size());
  if (heads == 0 || correlation.size() != importance.size() * importance.size()) {
    return InvalidArgument("--plot: need H importances and H*H correlations");
  }
  const int cell = std::clamp(kMaxPanel / heads, 4, kMaxCell), bar_h = std::max(cell, 12);
  const int bars_w = 200, side = heads * cell;
  Image image(kPad * 4 + 40 + bars_w + side + 80, kPad * 2 + std::max(heads * bar_h, side) + 20);
  const double top = *std::max_element(importance.begin(), importance.end());
  for (int h = 0; h < heads; ++h) {  // bars: "h<N>" then a bar as long as the importance
    const int y = kPad + h * bar_h;
    image.Text(kPad, y + 1, "h" + std::to_string(h), kTextScale, kBlack);
    const int len = static_cast<int>(std::lround(bars_w * importance[h] / std::max(top, 1e-30)));
    image.Fill(kPad + 40, y + 1, len, bar_h - 2, ColourOf(importance[h] / std::max(top, 1e-30)));
  }
  const int x0 = kPad * 3 + 40 + bars_w;
  for (int i = 0; i < heads; ++i) {  // correlation matrix, -1 (bottom of the scale) .. 1 (top)
    for (int j = 0; j < heads; ++j) {
      image.Fill(x0 + j * cell, kPad + i * cell, cell, cell,
                 ColourOf((correlation[i * heads + j] + 1.0) / 2.0));
    }
  }
  ColourScale(&image, x0 + side + 12, kPad, std::max(side, 60), -1.0, 1.0);
  return WritePng(image, path);
}

}  // namespace mha::plot
