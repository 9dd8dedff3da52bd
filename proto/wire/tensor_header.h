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

// "<field>: ", the start of a refusal that names the field it is about.
std::string FieldPrefix(std::string_view field);
// "float32", "float16", "bfloat16", "bool", or "DATA_TYPE_UNSPECIFIED" / "dtype(N)".
std::string DataTypeName(int dtype);
// Bytes per element of a supported dtype, 0 for anything else.
size_t ElementSize(int dtype);
std::vector<int64_t> ShapeOf(const v1::Tensor& tensor);

// Pure header checks (no Torch). On success *numel (if given) receives the element count.
Status CheckTensor(const v1::Tensor& tensor, std::string_view field, int64_t* numel = nullptr);
// The same check on its parts, for wire formats whose tensors are not a v1::Tensor (the Open
// Inference Protocol): `dtype` is a v1::DataType value, `data_bytes` the bytes that came.
Status CheckTensorBytes(int dtype, const std::vector<int64_t>& shape, size_t data_bytes,
                        std::string_view field, int64_t* numel = nullptr);
// Every dimension > 0 and the element count fits in 64 bits: the count.
StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape, std::string_view field);

// Conversions between the wire, core and ATen dtypes.
v1::DataType ToProtoDType(DType dtype);
StatusOr<DType> FromProtoDType(v1::DataType dtype);  // floating types only

}  // namespace mha::codec
