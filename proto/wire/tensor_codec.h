// proto Tensor <-> HostTensor (target mha_wire, torch-free). Decoding runs the header check
// (tensor_header.h) and checks BOOL bytes are 0 or 1; encoding writes a host tensor as it is (the
// core already cast it to the dtype the request asked for).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "mha/host_tensor.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"
#include "proto/wire/tensor_header.h"

namespace mha::codec {

// CheckTensor, then a host tensor (BOOL bytes must be 0 or 1). By default it owns a copy of the
// data; with `borrow` it is a view of tensor.data(): the caller then keeps `tensor` alive,
// unchanged, for as long as the result is used, and never writes to the result.
StatusOr<HostTensor> DecodeTensor(const v1::Tensor& tensor, std::string_view field,
                                  bool borrow = false);
// The same on its parts (CheckTensorBytes, BOOL bytes 0 or 1, then the tensor), for wire formats
// whose tensors are not a v1::Tensor: `dtype` is a v1::DataType value; with `borrow` the result
// is a view of `data`, which the caller then keeps alive and unchanged.
StatusOr<HostTensor> DecodeTensorBytes(int dtype, const std::vector<int64_t>& shape,
                                       std::string_view data, std::string_view field,
                                       bool borrow = false);

// The element type of a v1::DataType value the wire carries; INVALID_ARGUMENT for the others.
StatusOr<ElementType> ToElementType(int dtype);
v1::DataType ToProtoDType(ElementType type);

// Writes `tensor` (dtype, shape, data). INTERNAL for an undefined tensor.
Status EncodeTensor(const HostTensor& tensor, v1::Tensor* out);
// EncodeTensor but the data (for writers that send the tensor's bytes without a copy:
// server/frontends/common/borrowed_bytes.h).
Status EncodeTensorHeader(const HostTensor& tensor, v1::Tensor* out);

}  // namespace mha::codec
