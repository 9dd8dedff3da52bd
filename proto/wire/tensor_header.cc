#include "proto/wire/tensor_header.h"

namespace mha::codec {
namespace {

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
    case v1::INT32:
      return "int32";
    case v1::INT64:
      return "int64";
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
    case v1::INT32:
      return 4;
    case v1::INT64:
      return 8;
    default:
      return 0;
  }
}

std::vector<int64_t> ShapeOf(const v1::Tensor& tensor) {
  return {tensor.shape().begin(), tensor.shape().end()};
}

Status CheckTensor(const v1::Tensor& tensor, std::string_view field, int64_t* numel) {
  return CheckTensorBytes(tensor.dtype(), ShapeOf(tensor), tensor.data().size(), field, numel);
}

StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape, std::string_view field) {
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
  return count;
}

Status CheckTensorBytes(int dtype, const std::vector<int64_t>& shape, size_t data_bytes,
                        std::string_view field, int64_t* numel) {
  const size_t elem = ElementSize(dtype);
  if (elem == 0) {
    return InvalidArgument(Field(field) + "dtype " + DataTypeName(dtype) +
                           " is not supported (use FLOAT32, FLOAT16, BFLOAT16 or BOOL)");
  }
  auto count = ElementCount(shape, field);
  if (!count.ok()) return count.status();
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*count, static_cast<int64_t>(elem), &bytes)) {
    return InvalidArgument(Field(field) + "shape " + ShapeString(shape) + " " +
                           DataTypeName(dtype) + " needs more bytes than fit in 64 bits");
  }
  if (static_cast<uint64_t>(bytes) != data_bytes) {
    return InvalidArgument(Field(field) + "data has " + std::to_string(data_bytes) +
                           " bytes, shape " + ShapeString(shape) + " " + DataTypeName(dtype) +
                           " needs " + std::to_string(bytes));
  }
  if (numel) *numel = *count;
  return Status::Ok();
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
