// The three bare tokens NaN, Infinity and -Infinity that Python's json.dumps writes for float
// NaN and infinities (Triton's tritonclient.http sends a float mask's -inf as -Infinity) and that
// Triton's own JSON reader accepts (RapidJSON's kParseNanAndInfFlag). JSON has no such values and
// nlohmann's lexer refuses them, so a body is scanned once before parsing: each token that stands
// where a value stands (outside strings, after `[`, `,`, `:` or whitespace, before `,`, `]`, `}`,
// whitespace or the end) is rewritten in a copy of the text as the number 0 padded with spaces (the
// same length), and its kind is noted by the ordinal of the number token it became. The SAX parser
// (json_body.cc) counts number tokens in the same order, so it knows which zeros were tokens: it
// takes them as values only inside an input's `data` and refuses them everywhere else. A client
// cannot forge a token: a zero it sends is a number token whose kind stays kFinite.
//
// Bounded: one linear pass; the copy is made only when a token is found; one byte of kind per
// number token up to the last token found.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mha::serve::rest {

enum class NumberKind : uint8_t { kFinite = 0, kNaN, kInfinity, kMinusInfinity };

struct NonFiniteScan {
  std::string text;               // the rewritten text; empty when no token was found
  std::vector<NumberKind> kinds;  // by ordinal of the number tokens of `text`; empty when none

  bool found() const { return !kinds.empty(); }
  // The kind of number token `ordinal` (kFinite past the last token found).
  NumberKind Kind(size_t ordinal) const {
    return ordinal < kinds.size() ? kinds[ordinal] : NumberKind::kFinite;
  }
};

NonFiniteScan ScanNonFiniteTokens(std::string_view text);

// The float of a non-finite kind (quiet NaN, +inf, -inf); 0 for kFinite.
float NonFiniteValue(NumberKind kind);

// How a response writes `v` when it is not finite ("NaN", "Infinity", "-Infinity", as Python's
// json and Triton's TritonJson with kWriteNanAndInfFlag do); nullptr when it is finite.
const char* NonFiniteToken(float v);

}  // namespace mha::serve::rest
