#include "client/plot/figure.h"

#include <algorithm>
#include <cmath>

namespace mha::plot {

StatusOr<FigureFile> WriteFigures(const std::string& path, const std::string& flag,
                                  const std::vector<const Figure*>& figures) {
  if (figures.empty()) return InvalidArgument(flag + ": nothing to draw");
  double width = 0, height = 0;
  for (const Figure* f : figures) {
    width = std::max(width, f->width());
    height += f->height();
  }
  auto canvas = Canvas::Create(path, flag, static_cast<int>(std::ceil(width)),
                               static_cast<int>(std::ceil(height)));
  if (!canvas.ok()) return canvas.status();
  double y = 0;
  for (const Figure* f : figures) {
    f->Draw(**canvas, 0, y);
    y += f->height();
  }
  MHA_RETURN_IF_ERROR((*canvas)->Finish());
  return FigureFile{(*canvas)->width(), (*canvas)->height(), (*canvas)->texts()};
}

}  // namespace mha::plot
