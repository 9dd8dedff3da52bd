// A model's head analysis (`mha-client analyze --plot`): the importance of each head as bars with
// their values, each head's effective rank against its maximum, and the H x H correlation of the
// heads' W^O blocks as a heat map with head labels on both axes and a labelled colour scale.
#pragma once

#include <string>
#include <vector>

#include "client/plot/axes.h"
#include "client/plot/figure.h"

namespace mha::plot {

struct HeadAnalysisData {
  std::string title;                   // bold first line (model, version, E, H)
  std::vector<std::string> notes;      // lines under it (what the numbers are)
  std::vector<double> importance;      // [H]
  std::vector<double> effective_rank;  // [H]
  double max_rank = 0;                 // a head's largest possible rank
  std::vector<double> correlation;     // [H, H] row-major, in [-1, 1]
};

class AnalysisFigure : public Figure {
 public:
  // INVALID_ARGUMENT naming the sizes when they are not H, H and H * H (H >= 1).
  static StatusOr<AnalysisFigure> Make(HeadAnalysisData data);

  double width() const override { return width_; }
  double height() const override { return height_; }
  void Draw(Canvas& canvas, double x, double y) const override;

  // The correlation map, relative to the figure's top-left corner (H x H cells).
  Rect correlation_map() const { return heat_; }

 private:
  AnalysisFigure() = default;
  void Layout();
  void DrawBars(Canvas& canvas, const Rect& plot, const std::vector<double>& values, double high,
                const std::string& title, const std::string& axis, bool of_max) const;
  void DrawCorrelation(Canvas& canvas, const Rect& map) const;

  HeadAnalysisData in_;
  Rect importance_, rank_, heat_;
  double header_h_ = 0, width_ = 0, height_ = 0;
};

}  // namespace mha::plot
