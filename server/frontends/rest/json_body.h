// Parsing an untrusted KServe v2 REST request body with nlohmann::json's SAX parser, bounded: the
// nesting depth is checked before parsing (core/src/load/json_text.h), tensor `data` arrays of
// `inputs` never become JSON trees (their values are collected as they are parsed, 4 bytes per
// value; the tree keeps `"data": []`), and the rest of the document may hold at most `max_values`
// JSON values. Inside an input's data, and only there, the values NaN, Infinity and -Infinity are
// accepted as Python's json.dumps and Triton write them (json_nonfinite.h); anywhere else they are
// invalid JSON, as before. So a hostile body costs at most a few times its size in memory and a few
// linear passes in time; it never recurses deeper than `max_depth`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mha/status.h"

namespace mha::serve::rest {

// The values of one input's `data` (flattened row-major, nested arrays allowed), as float32.
struct TensorData {
  bool present = false;   // the input had a `data` array
  bool repeated = false;  // `data` given twice
  int64_t count = 0;
  std::string floats;       // `count` float32 values, native byte order
  int64_t bools = 0;        // how many of them were JSON true/false
  int64_t non_numbers = 0;  // strings, nulls and objects (always an error)
};

struct ParsedBody {
  nlohmann::json document;       // the body without the inputs' data values
  std::vector<TensorData> data;  // by index of `inputs`
};

struct BodyLimits {
  int max_depth = 32;
  int64_t max_values = 1 << 16;  // JSON values outside tensor data
};

// INVALID_ARGUMENT with the reason (not JSON, too deep, too many values) when it cannot.
StatusOr<ParsedBody> ParseJsonBody(std::string_view text, const BodyLimits& limits);

}  // namespace mha::serve::rest
