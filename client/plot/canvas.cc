#include "client/plot/canvas.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cctype>
#include <cmath>

namespace mha::plot {

struct Canvas::Cairo {
  cairo_surface_t* surface;
  cairo_t* cr;
  explicit Cairo(cairo_surface_t* s) : surface(s), cr(cairo_create(s)) {}
  ~Cairo() {
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
  }
  Cairo(const Cairo&) = delete;
  Cairo& operator=(const Cairo&) = delete;
};

namespace {

constexpr const char* kFontFamily = "DejaVu Sans";

void SelectFont(cairo_t* cr, double size, bool bold) {
  cairo_select_font_face(cr, kFontFamily, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

// A context on a 1x1 image for measuring text before any canvas exists.
cairo_t* Scratch() {
  static cairo_t* cr = [] {
    cairo_surface_t* s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t* c = cairo_create(s);
    cairo_surface_destroy(s);  // the context holds its own reference
    return c;
  }();
  return cr;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

void SetColour(cairo_t* cr, const Rgb& c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

}  // namespace

StatusOr<ImageFormat> FormatOfPath(const std::string& path, const std::string& flag) {
  const size_t dot = path.find_last_of('.');
  const size_t slash = path.find_last_of('/');
  const std::string ext = dot == std::string::npos || (slash != std::string::npos && dot < slash)
                              ? ""
                              : Lower(path.substr(dot));
  if (ext == ".png") return ImageFormat::kPng;
  if (ext == ".svg") return ImageFormat::kSvg;
  if (ext == ".pdf") return ImageFormat::kPdf;
  return InvalidArgument(flag + ": '" + path + "' " +
                         (ext.empty() ? "has no extension" : "has extension '" + ext + "'") +
                         "; the format follows the extension: .png, .svg or .pdf");
}

double TextWidth(const std::string& text, double size, bool bold) {
  cairo_t* cr = Scratch();
  SelectFont(cr, size, bold);
  cairo_text_extents_t e;
  cairo_text_extents(cr, text.c_str(), &e);
  return e.x_advance;
}

StatusOr<std::unique_ptr<Canvas>> Canvas::Create(const std::string& path, const std::string& flag,
                                                 int width, int height) {
  auto format = FormatOfPath(path, flag);
  if (!format.ok()) return format.status();
  if (width <= 0 || height <= 0 || width > 32767 || height > 32767) {
    return InvalidArgument(flag + ": a figure of " + std::to_string(width) + "x" +
                           std::to_string(height) + " is outside 1..32767 on each side");
  }
  cairo_surface_t* surface = nullptr;
  switch (*format) {
    case ImageFormat::kPng:
      surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
      break;
    case ImageFormat::kSvg:
      surface = cairo_svg_surface_create(path.c_str(), width, height);
      break;
    case ImageFormat::kPdf:
      surface = cairo_pdf_surface_create(path.c_str(), width, height);
      break;
  }
  if (const cairo_status_t s = cairo_surface_status(surface); s != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(surface);
    return Internal(flag + ": cannot write '" + path + "': " + cairo_status_to_string(s));
  }
  return std::unique_ptr<Canvas>(
      new Canvas(std::make_unique<Cairo>(surface), *format, path, width, height));
}

Canvas::Canvas(std::unique_ptr<Cairo> cairo, ImageFormat format, std::string path, int width,
               int height)
    : cairo_(std::move(cairo)),
      format_(format),
      path_(std::move(path)),
      width_(width),
      height_(height) {
  Fill({0, 0, static_cast<double>(width), static_cast<double>(height)}, kWhite);
}

Canvas::~Canvas() = default;

void Canvas::Fill(const Rect& r, const Rgb& colour) {
  SetColour(cairo_->cr, colour);
  cairo_rectangle(cairo_->cr, r.x, r.y, r.w, r.h);
  cairo_fill(cairo_->cr);
}

void Canvas::Stroke(const Rect& r, const Rgb& colour, double line_width) {
  SetColour(cairo_->cr, colour);
  cairo_set_line_width(cairo_->cr, line_width);
  cairo_rectangle(cairo_->cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cairo_->cr);
}

void Canvas::Line(double x0, double y0, double x1, double y1, const Rgb& colour, double line_width,
                  bool dashed) {
  SetColour(cairo_->cr, colour);
  cairo_set_line_width(cairo_->cr, line_width);
  const double dash[] = {4, 3};
  cairo_set_dash(cairo_->cr, dash, dashed ? 2 : 0, 0);
  cairo_move_to(cairo_->cr, x0, y0);
  cairo_line_to(cairo_->cr, x1, y1);
  cairo_stroke(cairo_->cr);
  cairo_set_dash(cairo_->cr, nullptr, 0, 0);
}

void Canvas::Hatch(const Rect& r) {
  Fill(r, {0.86, 0.86, 0.86});
  cairo_save(cairo_->cr);
  cairo_rectangle(cairo_->cr, r.x, r.y, r.w, r.h);
  cairo_clip(cairo_->cr);
  SetColour(cairo_->cr, {0.35, 0.35, 0.35});
  cairo_set_line_width(cairo_->cr, 1);
  constexpr double kGap = 5;
  for (double d = -r.h; d < r.w; d += kGap) {  // lines of slope 1 crossing the rectangle
    cairo_move_to(cairo_->cr, r.x + d, r.bottom());
    cairo_line_to(cairo_->cr, r.x + d + r.h, r.y);
  }
  cairo_stroke(cairo_->cr);
  cairo_restore(cairo_->cr);
}

void Canvas::Text(double x, double y, const std::string& text, const TextStyle& s) {
  if (text.empty()) return;
  texts_.push_back(text);
  SelectFont(cairo_->cr, s.size, s.bold);
  cairo_text_extents_t e, digit;
  cairo_text_extents(cairo_->cr, text.c_str(), &e);
  cairo_text_extents(cairo_->cr, "0", &digit);
  const double along = s.h == Align::kStart    ? 0
                       : s.h == Align::kCentre ? -e.x_advance / 2
                                               : -e.x_advance;
  const double across = s.v == Align::kStart    ? digit.height
                        : s.v == Align::kCentre ? digit.height / 2
                                                : 0;
  cairo_save(cairo_->cr);
  cairo_translate(cairo_->cr, x, y);
  if (s.vertical) cairo_rotate(cairo_->cr, -M_PI / 2);
  SetColour(cairo_->cr, s.colour);
  cairo_move_to(cairo_->cr, along, across);
  cairo_show_text(cairo_->cr, text.c_str());
  cairo_restore(cairo_->cr);
}

Status Canvas::Finish() {
  if (finished_) return Status::Ok();
  finished_ = true;
  cairo_status_t s = cairo_status(cairo_->cr);
  if (s == CAIRO_STATUS_SUCCESS && format_ == ImageFormat::kPng) {
    cairo_surface_flush(cairo_->surface);
    s = cairo_surface_write_to_png(cairo_->surface, path_.c_str());
  }
  cairo_surface_finish(cairo_->surface);  // SVG/PDF: writes the rest of the file and closes it
  if (s == CAIRO_STATUS_SUCCESS) s = cairo_surface_status(cairo_->surface);
  if (s != CAIRO_STATUS_SUCCESS) {
    return Internal("cannot write '" + path_ + "': " + cairo_status_to_string(s));
  }
  return Status::Ok();
}

}  // namespace mha::plot
