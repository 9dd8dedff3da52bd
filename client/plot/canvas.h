// The drawing layer of mha-client's pictures (docs/heads.md): a cairo surface of the file's format
// (chosen by the path's extension: .png, .svg or .pdf), with the few primitives the figures use
// (filled and stroked rectangles, lines, hatching, text in DejaVu Sans through fontconfig).
// Every text drawn is also recorded, in order (texts()): the SVG surface writes text as glyph
// outlines, so the record is how a caller (and the tests) can name what a picture says.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mha/status.h"

namespace mha::plot {

enum class ImageFormat { kPng, kSvg, kPdf };

// The format named by `path`'s extension (case-insensitive). INVALID_ARGUMENT naming `flag`, the
// path and the choices for any other extension.
StatusOr<ImageFormat> FormatOfPath(const std::string& path, const std::string& flag);

struct Rgb {
  double r = 0, g = 0, b = 0;
};
inline constexpr Rgb kBlack{0, 0, 0}, kWhite{1, 1, 1}, kGrey{0.55, 0.55, 0.55};

enum class Align { kStart, kCentre, kEnd };

struct TextStyle {
  double size = 11;  // font size (units: PNG pixels, SVG/PDF points)
  bool bold = false;
  Align h = Align::kStart;   // x is the text's left end, centre or right end
  Align v = Align::kCentre;  // y is its top, middle or bottom (of the font's digits)
  bool vertical = false;     // read bottom to top (rotated 90 degrees counter-clockwise)
  Rgb colour = kBlack;

  static TextStyle Of(double size, Align h = Align::kStart, Align v = Align::kCentre) {
    TextStyle s;
    s.size = size;
    s.h = h;
    s.v = v;
    return s;
  }
  TextStyle Bold() const {
    TextStyle s = *this;
    s.bold = true;
    return s;
  }
  TextStyle Vertical() const {
    TextStyle s = *this;
    s.vertical = true;
    return s;
  }
  TextStyle Colour(const Rgb& c) const {
    TextStyle s = *this;
    s.colour = c;
    return s;
  }
};

// The advance width of `text` in the figures' font at `size` (a layout measures before it draws).
double TextWidth(const std::string& text, double size, bool bold = false);

struct Rect {
  double x = 0, y = 0, w = 0, h = 0;
  double right() const { return x + w; }
  double bottom() const { return y + h; }
};

class Canvas {
 public:
  // A white surface of width x height units writing `path` (its format from the extension; `flag`
  // names the option in errors). INVALID_ARGUMENT for a bad extension or size; INTERNAL when
  // cairo cannot make the surface (e.g. an SVG/PDF file that cannot be created).
  static StatusOr<std::unique_ptr<Canvas>> Create(const std::string& path, const std::string& flag,
                                                  int width, int height);
  ~Canvas();
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  int width() const { return width_; }
  int height() const { return height_; }
  ImageFormat format() const { return format_; }

  void Fill(const Rect& r, const Rgb& colour);
  void Stroke(const Rect& r, const Rgb& colour, double line_width = 1);
  void Line(double x0, double y0, double x1, double y1, const Rgb& colour, double line_width = 1,
            bool dashed = false);
  // Light grey, crossed by dark diagonal lines: what "masked" looks like in every figure.
  void Hatch(const Rect& r);
  void Text(double x, double y, const std::string& text, const TextStyle& style = {});

  // Every text drawn so far, in order.
  const std::vector<std::string>& texts() const { return texts_; }

  // Ends the drawing and writes the file (PNG: now; SVG/PDF: the surface's last bytes). INTERNAL
  // with the path and cairo's reason on failure. Drawing after Finish is a no-op.
  Status Finish();

 private:
  struct Cairo;  // the surface and its context (canvas.cc: cairo stays out of this header)
  Canvas(std::unique_ptr<Cairo> cairo, ImageFormat format, std::string path, int width, int height);

  std::unique_ptr<Cairo> cairo_;
  ImageFormat format_;
  std::string path_;
  int width_, height_;
  bool finished_ = false;
  std::vector<std::string> texts_;
};

}  // namespace mha::plot
