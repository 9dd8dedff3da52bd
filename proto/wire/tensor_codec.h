// proto Tensor <-> at::Tensor (target mha_wire_torch). Decoding runs the torch-free header check
// (tensor_header.h) before Torch is touched, then checks BOOL bytes are 0 or 1.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mha/status.h"
#include "mha/v1/attention.pb.h"
#include "proto/wire/tensor_header.h"

namespace mha::codec {

// CheckTensor, then a CPU at::Tensor (BOOL bytes must be 0 or 1). By default it owns a copy of
// the data; with `borrow` it points into tensor.data() when that is suitably aligned (no copy):
// the caller then keeps `tensor` alive, unchanged, for as long as the result is used, and never
// writes to the result.
StatusOr<at::Tensor> DecodeTensor(const v1::Tensor& tensor, std::string_view field,
                                  bool borrow = false);
// The same on its parts (CheckTensorBytes, BOOL bytes 0 or 1, then the tensor), for wire formats
// whose tensors are not a v1::Tensor: `dtype` is a v1::DataType value; with `borrow` the result
// may point into `data`, which the caller then keeps alive and unchanged.
StatusOr<at::Tensor> DecodeTensorBytes(int dtype, const std::vector<int64_t>& shape,
                                       std::string_view data, std::string_view field,
                                       bool borrow = false);

// The at::ScalarType of a v1::DataType value the wire carries; INVALID_ARGUMENT for the others.
StatusOr<at::ScalarType> ToScalarType(int dtype);

// Writes `tensor` (any device) as `dtype` (DATA_TYPE_UNSPECIFIED = the tensor's own dtype).
// INVALID_ARGUMENT for dtypes the wire cannot carry.
Status EncodeTensor(const at::Tensor& tensor, v1::DataType dtype, v1::Tensor* out);
// EncodeTensor but the data: `out` gets the dtype and shape; the result is the contiguous CPU
// tensor in that dtype whose memory is the data (for writers that send it without a copy:
// server/frontends/common/borrowed_bytes.h).
StatusOr<at::Tensor> EncodeTensorHeader(const at::Tensor& tensor, v1::DataType dtype,
                                        v1::Tensor* out);

}  // namespace mha::codec
