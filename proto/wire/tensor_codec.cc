#include "proto/wire/tensor_codec.h"

#include <cstring>
#include <string>

#include "proto/wire/dtype_table.h"

namespace mha::codec {
namespace {

static_assert(sizeof(float) == 4, "float32 must be 4 bytes");

bool HostIsLittleEndian() {
  const uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

}  // namespace

StatusOr<ElementType> ToElementType(int dtype) {
  const DTypeInfo* d = FindDType(dtype);
  if (d != nullptr) return d->element;
  return InvalidArgument("dtype " + DataTypeName(dtype) + " is not supported");
}

v1::DataType ToProtoDType(ElementType type) { return DTypeOf(type).wire; }

StatusOr<HostTensor> DecodeTensor(const v1::Tensor& tensor, std::string_view field, bool borrow) {
  return DecodeTensorBytes(tensor.dtype(), ShapeOf(tensor), tensor.data(), field, borrow);
}

StatusOr<HostTensor> DecodeTensorBytes(int dtype, const std::vector<int64_t>& shape,
                                       std::string_view data, std::string_view field, bool borrow) {
  if (!HostIsLittleEndian()) return Unimplemented("big-endian hosts are not supported");
  MHA_RETURN_IF_ERROR(CheckTensorBytes(dtype, shape, data.size(), field));
  if (dtype == v1::BOOL) {
    for (size_t i = 0; i < data.size(); ++i) {
      const auto byte = static_cast<unsigned char>(data[i]);
      if (byte > 1) {
        return InvalidArgument(FieldPrefix(field) + "BOOL element " + std::to_string(i) + " is " +
                               std::to_string(byte) + " (must be 0 or 1)");
      }
    }
  }
  auto type = ToElementType(dtype);
  if (!type.ok()) return InvalidArgument(FieldPrefix(field) + type.status().message());
  const std::string name(field);
  if (borrow) return HostTensor::View(*type, shape, data.data(), data.size(), nullptr, name);
  return HostTensor::Copy(*type, shape, data.data(), data.size(), name);
}

Status EncodeTensorHeader(const HostTensor& tensor, v1::Tensor* out) {
  if (!tensor.defined()) return Internal("EncodeTensor: undefined tensor");
  if (!HostIsLittleEndian()) return Unimplemented("big-endian hosts are not supported");
  out->set_dtype(ToProtoDType(tensor.dtype()));
  out->clear_shape();
  for (int64_t d : tensor.shape()) out->add_shape(d);
  return Status::Ok();
}

Status EncodeTensor(const HostTensor& tensor, v1::Tensor* out) {
  MHA_RETURN_IF_ERROR(EncodeTensorHeader(tensor, out));
  out->mutable_data()->assign(tensor.data(), tensor.bytes());
  return Status::Ok();
}

}  // namespace mha::codec
