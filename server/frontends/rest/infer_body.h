// The KServe v2 REST inference request body -> inference::ModelInferRequest, so that the Open
// Inference Protocol's decoder (server/frontends/oip/infer_request.h) does the rest: the same
// names, checks, messages and ServerCore::Infer as gRPC ModelInfer.
//
//   {"id": "...", "parameters": {...},
//    "inputs":  [{"name", "shape": [..], "datatype", "parameters": {...}, "data": [..]}],
//    "outputs": [{"name", "parameters": {"binary_data": true, ...}}]}
//
// Tensor data comes either as JSON `data` (flattened or nested row-major; numbers for
// FP32/FP16/BF16, and there also NaN, Infinity, -Infinity as Python writes them (json_body.h);
// true/false for BOOL) or, with the binary tensor extension, as bytes after the
// JSON: the header `Inference-Header-Content-Length` gives the JSON's length, each binary input
// has parameters.binary_data_size, and the inputs' bytes follow in the order of `inputs`
// (contiguous row-major little-endian, BOOL one byte). Either way every input ends up in
// raw_input_contents. Parameters: JSON booleans become bool_param, integers int64_param (uint64
// above 2^63-1), other numbers double_param, strings string_param. The REST-only parameters
// (binary_data_size on inputs, binary_data on outputs, binary_data_output on the request) are
// taken out; the rest go to the decoder as they are. Unknown keys in the JSON are refused.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "inference/grpc_service.pb.h"
#include "mha/status.h"

namespace mha::serve::rest {

inline constexpr char kHeaderLengthHeader[] = "Inference-Header-Content-Length";

struct InferBody {
  inference::ModelInferRequest request;       // model name/version are the URL's: set by the caller
  bool binary_data_output = false;            // the request-level default for every output
  std::map<std::string, bool> binary_output;  // outputs[i].parameters.binary_data, by name

  // Whether output `name` goes back as binary.
  bool Binary(const std::string& name) const {
    const auto it = binary_output.find(name);
    return it == binary_output.end() ? binary_data_output : it->second;
  }
};

struct InferBodyLimits {
  int max_depth = 32;
  int64_t max_values = 1 << 16;  // JSON values outside tensor data
};

// `header_length`: the Inference-Header-Content-Length header's text (nullopt: no header, the
// whole body is JSON). INVALID_ARGUMENT saying what is wrong for anything malformed.
StatusOr<InferBody> ParseInferBody(std::string_view body,
                                   const std::optional<std::string>& header_length,
                                   const InferBodyLimits& limits);

}  // namespace mha::serve::rest
