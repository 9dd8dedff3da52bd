#include "proto/wire/tensor_codec.h"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstring>
#include <limits>
#include <utility>

namespace mha::codec {
namespace {

static_assert(sizeof(float) == 4, "float32 must be 4 bytes");

bool HostIsLittleEndian() {
  const uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

// The ATen column of the dtype table (dtype_table.h).
constexpr std::pair<v1::DataType, at::ScalarType> kScalarTypes[] = {
    {v1::FLOAT32, at::kFloat}, {v1::FLOAT16, at::kHalf}, {v1::BFLOAT16, at::kBFloat16},
    {v1::BOOL, at::kBool},     {v1::INT32, at::kInt},    {v1::INT64, at::kLong}};

StatusOr<v1::DataType> FromScalarType(at::ScalarType type) {
  for (const auto& [wire, scalar] : kScalarTypes) {
    if (scalar == type) return wire;
  }
  return InvalidArgument(std::string("tensor dtype ") + c10::toString(type) +
                         " cannot be sent (float32, float16, bfloat16, bool, int32 or int64)");
}

std::string Field(std::string_view field) { return std::string(field) + ": "; }

}  // namespace

StatusOr<at::ScalarType> ToScalarType(int dtype) {
  for (const auto& [wire, scalar] : kScalarTypes) {
    if (wire == dtype) return scalar;
  }
  return InvalidArgument("dtype " + DataTypeName(dtype) + " is not supported");
}

StatusOr<at::Tensor> DecodeTensor(const v1::Tensor& tensor, std::string_view field, bool borrow) {
  return DecodeTensorBytes(tensor.dtype(), ShapeOf(tensor), tensor.data(), field, borrow);
}

StatusOr<at::Tensor> DecodeTensorBytes(int dtype, const std::vector<int64_t>& shape,
                                       std::string_view data, std::string_view field, bool borrow) {
  if (!HostIsLittleEndian()) return Unimplemented("big-endian hosts are not supported");
  int64_t numel = 0;
  MHA_RETURN_IF_ERROR(CheckTensorBytes(dtype, shape, data.size(), field, &numel));
  if (dtype == v1::BOOL) {
    for (size_t i = 0; i < data.size(); ++i) {
      const auto byte = static_cast<unsigned char>(data[i]);
      if (byte > 1) {
        return InvalidArgument(Field(field) + "BOOL element " + std::to_string(i) + " is " +
                               std::to_string(byte) + " (must be 0 or 1)");
      }
    }
  }
  auto type = ToScalarType(dtype);
  if (!type.ok()) return InvalidArgument(Field(field) + type.status().message());
  try {
    const auto address = reinterpret_cast<uintptr_t>(data.data());
    if (borrow && address % alignof(std::max_align_t) == 0) {
      return at::from_blob(const_cast<char*>(data.data()), shape, at::TensorOptions().dtype(*type));
    }
    at::Tensor out = at::empty(shape, at::TensorOptions().dtype(*type));
    if (!data.empty()) std::memcpy(out.data_ptr(), data.data(), data.size());
    return out;
  } catch (const std::exception& e) {
    return Internal(Field(field) + "cannot allocate tensor: " + e.what());
  }
}

Status EncodeTensor(const at::Tensor& tensor, v1::DataType dtype, v1::Tensor* out) {
  auto t = EncodeTensorHeader(tensor, dtype, out);
  if (!t.ok()) return t.status();
  const size_t bytes = static_cast<size_t>(t->numel()) * t->element_size();
  out->mutable_data()->assign(static_cast<const char*>(t->data_ptr()), bytes);
  return Status::Ok();
}

StatusOr<at::Tensor> EncodeTensorHeader(const at::Tensor& tensor, v1::DataType dtype,
                                        v1::Tensor* out) {
  if (!tensor.defined()) return Internal("EncodeTensor: undefined tensor");
  if (!HostIsLittleEndian()) return Unimplemented("big-endian hosts are not supported");
  try {
    at::Tensor t = tensor;
    if (dtype != v1::DATA_TYPE_UNSPECIFIED) {
      auto type = ToScalarType(dtype);
      if (!type.ok()) return type.status();
      t = t.to(at::kCPU, *type);
    } else {
      auto wire = FromScalarType(t.scalar_type());
      if (!wire.ok()) return wire.status();
      dtype = *wire;
      t = t.to(at::kCPU);
    }
    t = t.contiguous();
    out->set_dtype(dtype);
    out->clear_shape();
    for (int64_t d : t.sizes()) out->add_shape(d);
    return t;
  } catch (const std::exception& e) {
    return Internal(std::string("cannot encode tensor: ") + e.what());
  }
}

}  // namespace mha::codec
