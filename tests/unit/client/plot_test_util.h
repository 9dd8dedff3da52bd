// Readers for the pictures the plot tests write: a PNG read back through cairo (size, pixels), an
// SVG parsed as XML by python3's xml.etree (size, glyphs drawn), a PDF read by poppler (its text
// through pdftotext, its page size through pdfinfo). Each tool's absence is reported, not hidden:
// the caller skips with the reason.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "client/plot/canvas.h"

namespace mha::testing {

struct PngImage {
  bool ok = false;
  std::string error;  // cairo's reason when not ok
  int width = 0, height = 0;
  std::vector<uint32_t> pixels;  // cairo RGB24: 0x00RRGGBB
  std::array<int, 3> At(double x, double y) const;
};
PngImage ReadPng(const std::string& path);

// The colour a figure asked for, in 0..255 (what a PNG pixel holds, up to rounding).
std::array<int, 3> Bytes(const plot::Rgb& c);
// Largest channel difference.
int ColourDistance(const std::array<int, 3>& a, const std::array<int, 3>& b);

struct SvgSummary {
  bool parsed = false;
  std::string error;             // the parser's message, or why it did not run
  double width = 0, height = 0;  // the root's width and height (points)
  int64_t glyph_uses = 0;        // <use xlink:href="#glyph..."> elements: one per glyph drawn
};
// "" when python3 was not found at configure time.
std::string Python3();
SvgSummary ReadSvg(const std::string& path);

// poppler's tools ("" when not found at configure time).
std::string PdfToText();
std::string PdfInfo();
// pdftotext's text of the file (-layout off), or "" with *error set.
std::string PdfText(const std::string& path, std::string* error);
// pdfinfo's "Page size: W x H pts" as W and H; false with *error set.
bool PdfPageSize(const std::string& path, double* width, double* height, std::string* error);

// The bytes of a file ("" when it cannot be read).
std::string ReadFileBytes(const std::string& path);

// The glyphs cairo draws for these texts (one per character for the figures' font).
int64_t GlyphCount(const std::vector<std::string>& texts);

// Runs a shell command, its stdout into *out; the exit status.
int RunCapture(const std::string& command, std::string* out);

}  // namespace mha::testing
