#include "mha/host_tensor.h"

#include <cstring>
#include <limits>

#include "mha/shape_string.h"

namespace mha {

namespace {

struct TypeInfo {
  const char* name;
  size_t size;
};

TypeInfo Info(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return {"float32", 4};
    case ElementType::kFloat16:
      return {"float16", 2};
    case ElementType::kBFloat16:
      return {"bfloat16", 2};
    case ElementType::kBool:
      return {"bool", 1};
    case ElementType::kInt32:
      return {"int32", 4};
    case ElementType::kInt64:
      return {"int64", 8};
  }
  return {"float32", 4};
}

// The byte count of `shape` in `type`, or INVALID_ARGUMENT (a negative dimension, an overflow).
StatusOr<size_t> ByteCount(ElementType type, const std::vector<int64_t>& shape,
                           const std::string& field) {
  uint64_t n = Info(type).size;
  for (int64_t d : shape) {
    if (d < 0) {
      return InvalidArgument(field + ": negative dimension in shape " + ShapeString(shape));
    }
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return InvalidArgument(field + ": shape " + ShapeString(shape) + " is too large");
    }
    n *= static_cast<uint64_t>(d);
  }
  return static_cast<size_t>(n);
}

}  // namespace

const char* ElementTypeName(ElementType type) { return Info(type).name; }
size_t ElementSize(ElementType type) { return Info(type).size; }

bool IsFloating(ElementType type) {
  return type == ElementType::kFloat32 || type == ElementType::kFloat16 ||
         type == ElementType::kBFloat16;
}

ElementType ToElementType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ElementType::kFloat32;
    case DType::kFloat16:
      return ElementType::kFloat16;
    case DType::kBFloat16:
      return ElementType::kBFloat16;
  }
  return ElementType::kFloat32;
}

std::optional<DType> ToDType(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return DType::kFloat32;
    case ElementType::kFloat16:
      return DType::kFloat16;
    case ElementType::kBFloat16:
      return DType::kBFloat16;
    default:
      return std::nullopt;
  }
}

StatusOr<HostTensor> HostTensor::View(ElementType type, std::vector<int64_t> shape,
                                      const void* data, size_t bytes,
                                      std::shared_ptr<const void> owner, const std::string& field) {
  auto needed = ByteCount(type, shape, field);
  if (!needed.ok()) return needed.status();
  if (*needed != bytes) {
    return InvalidArgument(field + ": data has " + std::to_string(bytes) + " bytes, shape " +
                           ShapeString(shape) + " " + ElementTypeName(type) + " needs " +
                           std::to_string(*needed));
  }
  HostTensor t;
  t.defined_ = true;
  t.dtype_ = type;
  t.shape_ = std::move(shape);
  t.data_ = static_cast<const char*>(data);
  t.bytes_ = bytes;
  t.owner_ = std::move(owner);
  return t;
}

StatusOr<HostTensor> HostTensor::DeviceView(ElementType type, std::vector<int64_t> shape,
                                            const void* data, size_t bytes, int device,
                                            std::shared_ptr<const void> owner,
                                            const std::string& field) {
  if (device < 0) {
    return InvalidArgument(field + ": device " + std::to_string(device) + " is not a CUDA device");
  }
  auto view = View(type, std::move(shape), data, bytes, std::move(owner), field);
  if (view.ok()) view->device_ = device;
  return view;
}

StatusOr<HostTensor> HostTensor::Copy(ElementType type, std::vector<int64_t> shape,
                                      const void* data, size_t bytes, const std::string& field) {
  auto copy = std::make_shared<std::string>(static_cast<const char*>(data), bytes);
  const char* p = copy->data();
  return View(type, std::move(shape), p, bytes, std::move(copy), field);
}

HostTensor HostTensor::FromFloats(std::vector<int64_t> shape, std::vector<float> values) {
  auto owned = std::make_shared<std::vector<float>>(std::move(values));
  const float* p = owned->data();
  const size_t bytes = owned->size() * sizeof(float);
  auto t = View(ElementType::kFloat32, std::move(shape), p, bytes, std::move(owned));
  return t.ok() ? std::move(t).value() : HostTensor();
}

int64_t HostTensor::size(int64_t d) const {
  const int64_t i = d < 0 ? d + dim() : d;
  return i >= 0 && i < dim() ? shape_[static_cast<size_t>(i)] : 0;
}

int64_t HostTensor::numel() const {
  if (!defined_) return 0;
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

}  // namespace mha
