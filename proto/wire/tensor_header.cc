#include "proto/wire/tensor_header.h"

#include "proto/wire/dtype_table.h"

namespace mha::codec {

std::string FieldPrefix(std::string_view field) { return std::string(field) + ": "; }

std::string DataTypeName(int dtype) {
  if (dtype == v1::DATA_TYPE_UNSPECIFIED) return "DATA_TYPE_UNSPECIFIED";
  const DTypeInfo* d = FindDType(dtype);
  return d != nullptr ? d->name : "dtype(" + std::to_string(dtype) + ")";
}

size_t ElementSize(int dtype) {
  const DTypeInfo* d = FindDType(dtype);
  return d != nullptr ? d->element_size : 0;
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
      return InvalidArgument(FieldPrefix(field) + "dimension " + std::to_string(i) + " of shape " +
                             ShapeString(shape) + " is " + std::to_string(shape[i]) +
                             " (every dimension must be > 0)");
    }
    if (__builtin_mul_overflow(count, shape[i], &count)) {
      return InvalidArgument(FieldPrefix(field) + "shape " + ShapeString(shape) +
                             " has more elements than fit in 64 bits");
    }
  }
  return count;
}

Status CheckTensorBytes(int dtype, const std::vector<int64_t>& shape, size_t data_bytes,
                        std::string_view field, int64_t* numel) {
  const size_t elem = ElementSize(dtype);
  if (elem == 0) {
    return InvalidArgument(FieldPrefix(field) + "dtype " + DataTypeName(dtype) +
                           " is not supported (use FLOAT32, FLOAT16, BFLOAT16 or BOOL)");
  }
  auto count = ElementCount(shape, field);
  if (!count.ok()) return count.status();
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*count, static_cast<int64_t>(elem), &bytes)) {
    return InvalidArgument(FieldPrefix(field) + "shape " + ShapeString(shape) + " " +
                           DataTypeName(dtype) + " needs more bytes than fit in 64 bits");
  }
  if (static_cast<uint64_t>(bytes) != data_bytes) {
    return InvalidArgument(FieldPrefix(field) + "data has " + std::to_string(data_bytes) +
                           " bytes, shape " + ShapeString(shape) + " " + DataTypeName(dtype) +
                           " needs " + std::to_string(bytes));
  }
  if (numel) *numel = *count;
  return Status::Ok();
}

v1::DataType ToProtoDType(DType dtype) { return DTypeOf(dtype).wire; }

StatusOr<DType> FromProtoDType(v1::DataType dtype) {
  const DTypeInfo* d = FindDType(dtype);
  if (d != nullptr && d->core) return *d->core;
  return InvalidArgument("dtype " + DataTypeName(dtype) +
                         " is not a floating type (FLOAT32, FLOAT16 or BFLOAT16)");
}

}  // namespace mha::codec
