// inference::ModelInferResponse (the Open Inference Protocol encoder's answer) -> the KServe v2
// REST response body:
//   {"model_name", "model_version", "id", "parameters": {"queue_us", "compute_us"},
//    "outputs": [{"name", "datatype", "shape", "data": [..]}]}
// An output asked for in binary (outputs[i].parameters.binary_data, or the request's
// binary_data_output) has "parameters": {"binary_data_size": N} instead of data, and its bytes
// follow the JSON in the order of `outputs`; the JSON's length is then the response header
// Inference-Header-Content-Length. JSON data is flattened row-major: floats in their shortest
// round-trip form (FP16/BF16 as the float they are), INT32/INT64 as integers, BOOL as
// true/false; NaN and infinities, which JSON cannot spell, as the bare tokens NaN, Infinity and
// -Infinity, as Python's json and Triton's REST API write them (and as requests may send them).
#pragma once

#include <optional>
#include <string>

#include "inference/grpc_service.pb.h"
#include "server/frontends/rest/infer_body.h"

namespace mha::serve::rest {

struct RestResponse {
  std::string body;
  std::optional<size_t> header_length;  // set when binary outputs follow the JSON
};

// `response` is consumed (its raw output bytes move into the body).
RestResponse EncodeInferResponse(inference::ModelInferResponse* response, const InferBody& request);

}  // namespace mha::serve::rest
