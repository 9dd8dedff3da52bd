// Pictures for mha-client (docs/heads.md): attention weights as a grid of heatmaps (one panel per
// head, query rows x key columns, a colour scale beside them) and the head analysis (importance
// bars and the correlation matrix of W^O). Pixels are drawn here; the PNG encoding is libpng's.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mha/status.h"

namespace mha::plot {

// An RGB image, row-major, 3 bytes per pixel.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Image(int w, int h);
  void Fill(int x, int y, int w, int h, const std::array<uint8_t, 3>& colour);
  // Digits, '.', '-', '+', 'e', 'h', ':' in a 3x5 pixel font scaled by `scale`.
  void Text(int x, int y, const std::string& text, int scale, const std::array<uint8_t, 3>& c);
  std::array<uint8_t, 3> At(int x, int y) const;
};

// Viridis-like colour of v in [0, 1] (clamped; NaN is grey).
std::array<uint8_t, 3> ColourOf(double v);

// libpng, 8-bit RGB. INVALID_ARGUMENT / INTERNAL with the path when it cannot be written.
Status WritePng(const Image& image, const std::string& path);

// The layout of a heatmap grid, for callers and tests.
struct GridLayout {
  int panels = 0, columns = 0;   // panels per row of the grid
  int cell = 1;                  // pixels per weight (after pooling)
  int panel_w = 0, panel_h = 0;  // pixels of one panel's heatmap
  int width = 0, height = 0;     // the whole image
  int origin_x(int p) const;     // top-left pixel of panel p's heatmap
  int origin_y(int p) const;
};
GridLayout LayoutGrid(int panels, int64_t rows, int64_t keys);

// `weights` [P, R, C] (P panels: heads, or 1 when averaged), values scaled from 0 to the largest
// weight; panels bigger than 240 pixels are max-pooled. Titled "h<N>" with `labels`.
StatusOr<GridLayout> PlotWeights(const at::Tensor& weights, const std::vector<int64_t>& labels,
                                 const std::string& path);

// Head importance bars (left) and the H x H correlation matrix (right, -1..1).
Status PlotAnalysis(const std::vector<double>& importance, const std::vector<double>& correlation,
                    const std::string& path);

}  // namespace mha::plot
