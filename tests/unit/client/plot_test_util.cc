#include "plot_test_util.h"

#include <cairo.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace mha::testing {

std::array<int, 3> PngImage::At(double x, double y) const {
  const int xi = std::clamp(static_cast<int>(x), 0, width - 1);
  const int yi = std::clamp(static_cast<int>(y), 0, height - 1);
  const uint32_t p = pixels[static_cast<size_t>(yi) * width + xi];
  return {static_cast<int>((p >> 16) & 0xff), static_cast<int>((p >> 8) & 0xff),
          static_cast<int>(p & 0xff)};
}

PngImage ReadPng(const std::string& path) {
  PngImage image;
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  if (const cairo_status_t status = cairo_surface_status(s); status != CAIRO_STATUS_SUCCESS) {
    image.error = cairo_status_to_string(status);
    cairo_surface_destroy(s);
    return image;
  }
  cairo_surface_flush(s);
  image.width = cairo_image_surface_get_width(s);
  image.height = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  for (int y = 0; y < image.height; ++y) {
    const auto* row = reinterpret_cast<const uint32_t*>(data + static_cast<size_t>(y) * stride);
    image.pixels.insert(image.pixels.end(), row, row + image.width);
  }
  image.ok = true;
  cairo_surface_destroy(s);
  return image;
}

std::array<int, 3> Bytes(const plot::Rgb& c) {
  return {static_cast<int>(std::lround(c.r * 255)), static_cast<int>(std::lround(c.g * 255)),
          static_cast<int>(std::lround(c.b * 255))};
}

int ColourDistance(const std::array<int, 3>& a, const std::array<int, 3>& b) {
  int d = 0;
  for (int k = 0; k < 3; ++k) d = std::max(d, std::abs(a[k] - b[k]));
  return d;
}

std::string Python3() { return MHA_PYTHON3; }
std::string PdfToText() { return MHA_PDFTOTEXT; }
std::string PdfInfo() { return MHA_PDFINFO; }

int RunCapture(const std::string& command, std::string* out) {
  out->clear();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

SvgSummary ReadSvg(const std::string& path) {
  SvgSummary svg;
  if (Python3().empty()) {
    svg.error = "python3 not found";
    return svg;
  }
  // Prints width, height (their numbers, without the unit) and the glyph uses, or the error.
  const std::string script =
      "import re,sys,xml.etree.ElementTree as E\n"
      "r=E.parse(sys.argv[1]).getroot()\n"
      "n=lambda v: re.match(r'[0-9.]+',v).group(0)\n"
      "h='{http://www.w3.org/1999/xlink}href'\n"
      "u=sum(1 for e in r.iter('{http://www.w3.org/2000/svg}use') if "
      "e.get(h,'').startswith('#glyph'))\n"
      "print(r.tag, n(r.get('width')), n(r.get('height')), u)\n";
  std::string out;
  const int code = RunCapture(Python3() + " -c \"" + script + "\" '" + path + "'", &out);
  std::istringstream in(out);
  std::string tag;
  if (code != 0 || !(in >> tag >> svg.width >> svg.height >> svg.glyph_uses) ||
      tag != "{http://www.w3.org/2000/svg}svg") {
    svg.error = "exit " + std::to_string(code) + ": " + out;
    return svg;
  }
  svg.parsed = true;
  return svg;
}

std::string PdfText(const std::string& path, std::string* error) {
  std::string out;
  const int code = RunCapture(PdfToText() + " '" + path + "' -", &out);
  if (code != 0) {
    *error = "pdftotext exit " + std::to_string(code) + ": " + out;
    return "";
  }
  return out;
}

bool PdfPageSize(const std::string& path, double* width, double* height, std::string* error) {
  std::string out;
  const int code = RunCapture(PdfInfo() + " '" + path + "'", &out);
  const size_t at = out.find("Page size:");
  if (code != 0 || at == std::string::npos ||
      std::sscanf(out.c_str() + at, "Page size: %lf x %lf pts", width, height) != 2) {
    *error = "pdfinfo exit " + std::to_string(code) + ": " + out;
    return false;
  }
  return true;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

int64_t GlyphCount(const std::vector<std::string>& texts) {
  int64_t n = 0;
  for (const std::string& t : texts) {
    for (unsigned char c : t) n += (c & 0xC0) != 0x80;  // UTF-8: count the first byte of each
  }
  return n;
}

}  // namespace mha::testing
