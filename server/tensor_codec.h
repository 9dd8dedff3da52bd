// proto Tensor <-> at::Tensor. Every check on a wire tensor (supported dtype, dimensions > 0,
// element count x element size computed with overflow checks == data.size(), BOOL bytes 0/1)
// runs before Torch is touched; errors are INVALID_ARGUMENT naming the field, e.g.
// "query: data has 100 bytes, shape [2,5,16] float32 needs 640".
// Shared by the server and the client library (target mha_codec).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mha/options.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"

namespace mha::codec {

// "float32", "float16", "bfloat16", "bool", or "DATA_TYPE_UNSPECIFIED" / "dtype(N)".
std::string DataTypeName(int dtype);
// Bytes per element of a supported dtype, 0 for anything else.
size_t ElementSize(int dtype);
// "[2,5,16]"
std::string ShapeString(const std::vector<int64_t>& shape);
std::vector<int64_t> ShapeOf(const v1::Tensor& tensor);

// Pure header checks (no Torch). On success *numel (if given) receives the element count.
Status CheckTensor(const v1::Tensor& tensor, std::string_view field, int64_t* numel = nullptr);

// CheckTensor, then a CPU at::Tensor (BOOL bytes must be 0 or 1). By default it owns a copy of
// the data; with `borrow` it points into tensor.data() when that is suitably aligned (no copy):
// the caller then keeps `tensor` alive, unchanged, for as long as the result is used, and never
// writes to the result.
StatusOr<at::Tensor> DecodeTensor(const v1::Tensor& tensor, std::string_view field,
                                  bool borrow = false);

// Writes `tensor` (any device) as `dtype` (DATA_TYPE_UNSPECIFIED = the tensor's own dtype).
// INVALID_ARGUMENT for dtypes the wire cannot carry.
Status EncodeTensor(const at::Tensor& tensor, v1::DataType dtype, v1::Tensor* out);

// Conversions between the wire, core and ATen dtypes.
v1::DataType ToProtoDType(DType dtype);
StatusOr<DType> FromProtoDType(v1::DataType dtype);  // floating types only

}  // namespace mha::codec
