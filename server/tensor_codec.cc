#include "tensor_codec.h"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstring>
#include <limits>

namespace mha::codec {
namespace {

static_assert(sizeof(float) == 4, "float32 must be 4 bytes");

bool HostIsLittleEndian() {
  const uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

StatusOr<at::ScalarType> ToScalarType(int dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return at::kFloat;
    case v1::FLOAT16:
      return at::kHalf;
    case v1::BFLOAT16:
      return at::kBFloat16;
    case v1::BOOL:
      return at::kBool;
    default:
      break;
  }
  return InvalidArgument("dtype " + DataTypeName(dtype) + " is not supported");
}

StatusOr<v1::DataType> FromScalarType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return v1::FLOAT32;
    case at::kHalf:
      return v1::FLOAT16;
    case at::kBFloat16:
      return v1::BFLOAT16;
    case at::kBool:
      return v1::BOOL;
    default:
      break;
  }
  return InvalidArgument(std::string("tensor dtype ") + c10::toString(type) +
                         " cannot be sent (float32, float16, bfloat16 or bool)");
}

std::string Field(std::string_view field) { return std::string(field) + ": "; }

}  // namespace

std::string DataTypeName(int dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_UNSPECIFIED:
      return "DATA_TYPE_UNSPECIFIED";
    case v1::FLOAT32:
      return "float32";
    case v1::FLOAT16:
      return "float16";
    case v1::BFLOAT16:
      return "bfloat16";
    case v1::BOOL:
      return "bool";
    default:
      return "dtype(" + std::to_string(dtype) + ")";
  }
}

size_t ElementSize(int dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return 4;
    case v1::FLOAT16:
    case v1::BFLOAT16:
      return 2;
    case v1::BOOL:
      return 1;
    default:
      return 0;
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<int64_t> ShapeOf(const v1::Tensor& tensor) {
  return {tensor.shape().begin(), tensor.shape().end()};
}

Status CheckTensor(const v1::Tensor& tensor, std::string_view field, int64_t* numel) {
  const size_t elem = ElementSize(tensor.dtype());
  if (elem == 0) {
    return InvalidArgument(Field(field) + "dtype " + DataTypeName(tensor.dtype()) +
                           " is not supported (use FLOAT32, FLOAT16, BFLOAT16 or BOOL)");
  }
  const std::vector<int64_t> shape = ShapeOf(tensor);
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      return InvalidArgument(Field(field) + "dimension " + std::to_string(i) + " of shape " +
                             ShapeString(shape) + " is " + std::to_string(shape[i]) +
                             " (every dimension must be > 0)");
    }
    if (__builtin_mul_overflow(count, shape[i], &count)) {
      return InvalidArgument(Field(field) + "shape " + ShapeString(shape) +
                             " has more elements than fit in 64 bits");
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<int64_t>(elem), &bytes)) {
    return InvalidArgument(Field(field) + "shape " + ShapeString(shape) + " " +
                           DataTypeName(tensor.dtype()) + " needs more bytes than fit in 64 bits");
  }
  if (static_cast<uint64_t>(bytes) != tensor.data().size()) {
    return InvalidArgument(Field(field) + "data has " + std::to_string(tensor.data().size()) +
                           " bytes, shape " + ShapeString(shape) + " " +
                           DataTypeName(tensor.dtype()) + " needs " + std::to_string(bytes));
  }
  if (numel) *numel = count;
  return Status::Ok();
}

StatusOr<at::Tensor> DecodeTensor(const v1::Tensor& tensor, std::string_view field, bool borrow) {
  if (!HostIsLittleEndian()) return Unimplemented("big-endian hosts are not supported");
  int64_t numel = 0;
  MHA_RETURN_IF_ERROR(CheckTensor(tensor, field, &numel));
  const std::string& data = tensor.data();
  if (tensor.dtype() == v1::BOOL) {
    for (size_t i = 0; i < data.size(); ++i) {
      const auto byte = static_cast<unsigned char>(data[i]);
      if (byte > 1) {
        return InvalidArgument(Field(field) + "BOOL element " + std::to_string(i) + " is " +
                               std::to_string(byte) + " (must be 0 or 1)");
      }
    }
  }
  auto type = ToScalarType(tensor.dtype());
  if (!type.ok()) return InvalidArgument(Field(field) + type.status().message());
  try {
    const auto address = reinterpret_cast<uintptr_t>(data.data());
    if (borrow && address % alignof(std::max_align_t) == 0) {
      return at::from_blob(const_cast<char*>(data.data()), ShapeOf(tensor),
                           at::TensorOptions().dtype(*type));
    }
    at::Tensor out = at::empty(ShapeOf(tensor), at::TensorOptions().dtype(*type));
    if (!data.empty()) std::memcpy(out.data_ptr(), data.data(), data.size());
    return out;
  } catch (const std::exception& e) {
    return Internal(Field(field) + "cannot allocate tensor: " + e.what());
  }
}

Status EncodeTensor(const at::Tensor& tensor, v1::DataType dtype, v1::Tensor* out) {
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
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    out->mutable_data()->assign(static_cast<const char*>(t.data_ptr()), bytes);
    return Status::Ok();
  } catch (const std::exception& e) {
    return Internal(std::string("cannot encode tensor: ") + e.what());
  }
}

v1::DataType ToProtoDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::FLOAT32;
    case DType::kFloat16:
      return v1::FLOAT16;
    case DType::kBFloat16:
      return v1::BFLOAT16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

StatusOr<DType> FromProtoDType(v1::DataType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return DType::kFloat32;
    case v1::FLOAT16:
      return DType::kFloat16;
    case v1::BFLOAT16:
      return DType::kBFloat16;
    default:
      break;
  }
  return InvalidArgument("dtype " + DataTypeName(dtype) +
                         " is not a floating type (FLOAT32, FLOAT16 or BFLOAT16)");
}

}  // namespace mha::codec
