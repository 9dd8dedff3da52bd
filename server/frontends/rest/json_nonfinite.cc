#include "server/frontends/rest/json_nonfinite.h"

#include <cmath>
#include <limits>

namespace mha::serve::rest {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Characters a JSON value may directly follow, and directly precede.
bool OpensValue(char c) { return IsSpace(c) || c == '[' || c == ',' || c == ':'; }
bool ClosesValue(char c) { return IsSpace(c) || c == ',' || c == ']' || c == '}'; }

// Characters of a number token (the lexer decides whether the run is a valid number).
bool InNumber(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// The length of the token at `at` when one of the three stands there as a value, else 0.
size_t TokenAt(std::string_view text, size_t at, NumberKind* kind) {
  if (at > 0 && !OpensValue(text[at - 1])) return 0;
  static constexpr struct {
    std::string_view word;
    NumberKind kind;
  } kTokens[] = {{"NaN", NumberKind::kNaN},
                 {"Infinity", NumberKind::kInfinity},
                 {"-Infinity", NumberKind::kMinusInfinity}};
  for (const auto& token : kTokens) {
    if (text.compare(at, token.word.size(), token.word) != 0) continue;
    const size_t end = at + token.word.size();
    if (end < text.size() && !ClosesValue(text[end])) return 0;
    *kind = token.kind;
    return token.word.size();
  }
  return 0;
}

}  // namespace

NonFiniteScan ScanNonFiniteTokens(std::string_view text) {
  NonFiniteScan scan;
  size_t numbers = 0;  // number tokens before `i`
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      ++i;
      continue;
    }
    NumberKind kind = NumberKind::kFinite;
    if (c == '"') {
      in_string = true;
      ++i;
    } else if (const size_t length = TokenAt(text, i, &kind); length > 0) {
      if (!scan.found()) scan.text.assign(text.data(), text.size());
      scan.text[i] = '0';
      for (size_t k = 1; k < length; ++k) scan.text[i + k] = ' ';
      scan.kinds.resize(numbers + 1, NumberKind::kFinite);
      scan.kinds[numbers++] = kind;
      i += length;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      ++numbers;
      while (i < text.size() && InNumber(text[i])) ++i;
    } else {
      ++i;
    }
  }
  return scan;
}

float NonFiniteValue(NumberKind kind) {
  switch (kind) {
    case NumberKind::kNaN:
      return std::numeric_limits<float>::quiet_NaN();
    case NumberKind::kInfinity:
      return std::numeric_limits<float>::infinity();
    case NumberKind::kMinusInfinity:
      return -std::numeric_limits<float>::infinity();
    case NumberKind::kFinite:
      break;
  }
  return 0.0f;
}

const char* NonFiniteToken(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return nullptr;
}

}  // namespace mha::serve::rest
