// Attention weights as heat maps (`mha-client forward -w --per-head --plot`, `decode -w --plot`):
// one panel per head (or one for the weights averaged over heads), rows down (query positions,
// or heads for a decode step) and keys across, one colour scale shared by every panel, masked
// positions and masked heads hatched and named in a legend, and a long sequence shown as a
// max-pooled view that says so in the figure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/plot/axes.h"
#include "client/plot/figure.h"

namespace mha::plot {

struct AttentionMaps {
  std::string title;                  // first line, bold (model, version, batch row)
  std::vector<std::string> notes;     // lines under it (what was asked: masks, causal, selection)
  int64_t rows = 0, keys = 0;         // of each panel
  std::vector<std::string> panels;    // one name per panel ("head 3", "mean of 8 heads")
  std::vector<float> weights;         // panels * rows * keys, row-major
  std::vector<uint8_t> masked;        // empty, rows * keys (every panel) or panels * rows * keys
  std::vector<uint8_t> panel_masked;  // empty or one per panel: the whole head is masked
  std::string masked_legend = "masked position";    // what a hatched cell means
  std::string panel_masked_legend = "masked head";  // what a hatched panel means
  int64_t first_row = 0;                            // position of row 0 (weights_query_begin)
  std::vector<std::string> row_names;  // non-empty: the rows' labels instead of positions
  std::string row_axis = "query position", key_axis = "key position";
  std::string scale_label = "attention weight";
  int64_t max_cells = 64;  // more rows or keys than this: a max-pooled view
};

class AttentionFigure : public Figure {
 public:
  // INVALID_ARGUMENT (naming the sizes) when weights, masks or names do not match the shape.
  static StatusOr<AttentionFigure> Make(AttentionMaps maps);

  double width() const override { return width_; }
  double height() const override { return height_; }
  void Draw(Canvas& canvas, double x, double y) const override;

  // The layout, relative to the figure's top-left corner: rows and keys merged per shown cell
  // (1 = every weight its own cell), the shown grid, panel p's map and a shown cell's centre.
  int64_t row_factor() const { return row_factor_; }
  int64_t key_factor() const { return key_factor_; }
  int64_t shown_rows() const { return shown_.front().rows; }
  int64_t shown_keys() const { return shown_.front().cols; }
  Rect map(size_t panel) const { return maps_rect_[panel]; }
  double scale_high() const { return scale_.hi; }
  void CellCentre(size_t panel, int64_t row, int64_t col, double* x, double* y) const;

 private:
  AttentionFigure() = default;
  void Layout();
  std::string RowLabel(int64_t shown_row) const;
  std::string KeyLabel(int64_t shown_col) const;
  void DrawHeader(Canvas& canvas, double x, double y) const;
  void DrawPanel(Canvas& canvas, size_t p, double x, double y) const;

  AttentionMaps in_;
  std::vector<Cells> shown_;  // per panel, after max-pooling
  int64_t row_factor_ = 1, key_factor_ = 1;
  ColourScale scale_;
  std::vector<std::string> header_;  // title, notes, the max-pooling note
  std::vector<Rect> maps_rect_;
  double header_h_ = 0, width_ = 0, height_ = 0;
  bool any_masked_cell_ = false, any_masked_panel_ = false;
};

}  // namespace mha::plot
