// Wire tensors without Torch: dtype names and sizes, shapes, and the header check every wire
// tensor passes before anything is decoded (supported dtype, dimensions > 0, element count x
// element size computed with overflow checks == data.size()); errors are INVALID_ARGUMENT naming
// the field, e.g. "query: data has 100 bytes, shape [2, 5, 16] float32 needs 640".
// Shared by the server's front ends and the client library (target mha_wire).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mha/options.h"
#include "mha/shape_string.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"

namespace mha::codec {

// "float32", "float16", "bfloat16", "bool", or "DATA_TYPE_UNSPECIFIED" / "dtype(N)".
std::string DataTypeName(int dtype);
// Bytes per element of a supported dtype, 0 for anything else.
size_t ElementSize(int dtype);
std::vector<int64_t> ShapeOf(const v1::Tensor& tensor);

// Pure header checks (no Torch). On success *numel (if given) receives the element count.
Status CheckTensor(const v1::Tensor& tensor, std::string_view field, int64_t* numel = nullptr);

// Conversions between the wire, core and ATen dtypes.
v1::DataType ToProtoDType(DType dtype);
StatusOr<DType> FromProtoDType(v1::DataType dtype);  // floating types only

}  // namespace mha::codec
