// The tensor every layer outside the core carries: an element type, a shape and a view of host
// bytes, with an owner that keeps the bytes alive. Or, for CUDA shared memory only
// (mha/device_memory.h), a view of bytes on a CUDA device (on_device(): data() is a device
// pointer that only the core dereferences, through LibTorch; the front ends carry it). No LibTorch:
// front ends, the wire codec, the serving layer and the app move these; one adapter in the core
// (mha/tensor_adapter.h) turns them into at::Tensor and back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mha/options.h"
#include "mha/status.h"

namespace mha {

// What the wire carries. The floating ones are a model's dtypes (DType).
enum class ElementType : int8_t { kFloat32, kFloat16, kBFloat16, kBool, kInt32, kInt64 };

const char* ElementTypeName(ElementType type);  // "float32", "float16", "bfloat16", "bool", ...
size_t ElementSize(ElementType type);           // bytes per element
bool IsFloating(ElementType type);
ElementType ToElementType(DType dtype);
std::optional<DType> ToDType(ElementType type);  // floating types only

class HostTensor {
 public:
  HostTensor() = default;  // undefined: "absent"
  // A view of `bytes` bytes at `data` (row-major, contiguous). `owner` keeps them alive; null when
  // the caller guarantees they outlive every use (a wire message the front end holds).
  // INVALID_ARGUMENT naming `field` when the shape's element count does not match `bytes`.
  static StatusOr<HostTensor> View(ElementType type, std::vector<int64_t> shape, const void* data,
                                   size_t bytes, std::shared_ptr<const void> owner,
                                   const std::string& field = "tensor");
  // A tensor owning a copy of `bytes` bytes at `data` (same checks).
  static StatusOr<HostTensor> Copy(ElementType type, std::vector<int64_t> shape, const void* data,
                                   size_t bytes, const std::string& field = "tensor");
  // The same checks for `bytes` bytes at device pointer `data` on CUDA device `device` (>= 0).
  static StatusOr<HostTensor> DeviceView(ElementType type, std::vector<int64_t> shape,
                                         const void* data, size_t bytes, int device,
                                         std::shared_ptr<const void> owner,
                                         const std::string& field = "tensor");
  // Float32 values, owned (warm-up inputs, tests).
  static HostTensor FromFloats(std::vector<int64_t> shape, std::vector<float> values);

  bool defined() const { return defined_; }
  ElementType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  const char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  int device() const { return device_; }  // the CUDA device of a DeviceView; -1 on the host
  bool on_device() const { return device_ >= 0; }

 private:
  bool defined_ = false;
  ElementType dtype_ = ElementType::kFloat32;
  std::vector<int64_t> shape_;
  const char* data_ = nullptr;
  size_t bytes_ = 0;
  std::shared_ptr<const void> owner_;
  int device_ = -1;
};

}  // namespace mha
