// A figure of mha-client's pictures: it knows its size before it draws (the layout measures its
// text), draws itself at an origin, and one file holds one or more of them stacked top to bottom.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "client/plot/canvas.h"

namespace mha::plot {

// The layout the figures share (points): the margin, the title's line and each note's below it,
// and the room above a panel for its title.
inline constexpr double kMargin = 16, kTitleLine = 24, kNoteLine = 16, kPanelTitle = 24;

class Figure {
 public:
  virtual ~Figure() = default;
  virtual double width() const = 0;
  virtual double height() const = 0;
  // Draws the figure with its top-left corner at (x, y).
  virtual void Draw(Canvas& canvas, double x, double y) const = 0;
};

// What a written file holds: its size (PNG pixels, SVG/PDF points) and every text drawn in it.
struct FigureFile {
  int width = 0, height = 0;
  std::vector<std::string> texts;
};

// `figures` stacked top to bottom (each at the left edge) in one file of `path`'s format (.png,
// .svg, .pdf); `flag` names the option in errors. INVALID_ARGUMENT for no figure or a bad
// extension, INTERNAL when the file cannot be written.
StatusOr<FigureFile> WriteFigures(const std::string& path, const std::string& flag,
                                  const std::vector<const Figure*>& figures);

}  // namespace mha::plot
