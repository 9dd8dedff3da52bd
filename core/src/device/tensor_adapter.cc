#include "mha/tensor_adapter.h"

#include <ATen/ATen.h>

#include <cstring>
#include <memory>
#include <utility>

#include "mha/device_stream.h"

namespace mha {

namespace {

constexpr std::pair<ElementType, at::ScalarType> kTypes[] = {
    {ElementType::kFloat32, at::kFloat},     {ElementType::kFloat16, at::kHalf},
    {ElementType::kBFloat16, at::kBFloat16}, {ElementType::kBool, at::kBool},
    {ElementType::kInt32, at::kInt},         {ElementType::kInt64, at::kLong}};

// A CUDA tensor over a device view's bytes (CUDA shared memory), no copy: the model moves it to its
// own device (a copy only when that is another device or the CPU). The front end checked the
// pointer is aligned to the element size.
at::Tensor DeviceTensor(const HostTensor& t) {
  const auto options =
      at::TensorOptions()
          .dtype(ToScalarType(t.dtype()))
          .device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(t.device())));
  void* data = const_cast<char*>(t.data());  // read-only by contract
  return at::from_blob(
      data, t.shape(), [owner = t.owner()](void*) {}, options);
}

// `t` in `type` written into `place` on its device (device to device, or host to device for a
// CPU model), synchronized; a DeviceView of the place. On the host (ToHost) when it does not fit.
HostTensor ToPlace(const at::Tensor& t, ElementType type, const DevicePlace& place);

}  // namespace

at::ScalarType ToScalarType(ElementType type) {
  for (const auto& [element, scalar] : kTypes) {
    if (element == type) return scalar;
  }
  return at::kFloat;
}

StatusOr<ElementType> ToElementType(at::ScalarType type) {
  for (const auto& [element, scalar] : kTypes) {
    if (scalar == type) return element;
  }
  return InvalidArgument(std::string("tensor dtype ") + c10::toString(type) +
                         " cannot be sent (float32, float16, bfloat16, bool, int32 or int64)");
}

at::Tensor ToTensor(const HostTensor& t) {
  if (!t.defined()) return at::Tensor();
  if (t.on_device()) return DeviceTensor(t);
  const auto options = at::TensorOptions().dtype(ToScalarType(t.dtype()));
  const auto address = reinterpret_cast<uintptr_t>(t.data());
  if (t.bytes() == 0 || address % ElementSize(t.dtype()) != 0) {
    at::Tensor copy = at::empty(t.shape(), options);
    if (t.bytes() > 0) std::memcpy(copy.data_ptr(), t.data(), t.bytes());
    return copy;
  }
  void* data = const_cast<char*>(t.data());  // read-only by contract
  if (!t.owner()) return at::from_blob(data, t.shape(), options);
  return at::from_blob(
      data, t.shape(), [owner = t.owner()](void*) {}, options);
}

HostTensor ToHost(const at::Tensor& t, ElementType type) {
  if (!t.defined()) return HostTensor();
  auto host = std::make_shared<at::Tensor>(
      t.to(ToScalarType(type)).to(at::kCPU).contiguous());  // cast where the tensor is
  const void* data = host->data_ptr();
  const size_t bytes = static_cast<size_t>(host->numel()) * host->element_size();
  std::vector<int64_t> shape(host->sizes().begin(), host->sizes().end());
  auto view = HostTensor::View(type, std::move(shape), data, bytes, std::move(host));
  TORCH_CHECK(view.ok(), view.status().ToString());
  return std::move(view).value();
}

HostTensor ToHost(const at::Tensor& t) {
  if (!t.defined()) return HostTensor();
  auto type = ToElementType(t.scalar_type());
  TORCH_CHECK(type.ok(), type.status().ToString());
  return ToHost(t, *type);
}

namespace {

HostTensor ToPlace(const at::Tensor& t, ElementType type, const DevicePlace& place) {
  if (!t.defined() || !place.defined()) return ToHost(t, type);
  const at::Tensor cast = t.to(ToScalarType(type)).contiguous();  // on its own device
  const size_t bytes = static_cast<size_t>(cast.numel()) * cast.element_size();
  if (bytes > place.bytes) return ToHost(cast, type);  // the front end answers "too small"
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(place.device));
  at::Tensor target = at::from_blob(place.data, cast.sizes(),
                                    at::TensorOptions().dtype(cast.scalar_type()).device(device));
  target.copy_(cast);
  SynchronizeCurrentStream(device);  // the bytes are in the region before the answer leaves
  if (cast.is_cuda() && cast.device() != device) SynchronizeCurrentStream(cast.device());
  std::vector<int64_t> shape(cast.sizes().begin(), cast.sizes().end());
  auto view = HostTensor::DeviceView(type, std::move(shape), place.data, bytes, place.device,
                                     place.owner, "output");
  TORCH_CHECK(view.ok(), view.status().ToString());
  return std::move(view).value();
}

}  // namespace

ForwardInputs ToForwardInputs(const HostInputs& in) {
  ForwardInputs f;
  f.query = ToTensor(in.query);
  f.key = ToTensor(in.key);
  f.value = ToTensor(in.value);
  f.key_padding_mask = ToTensor(in.key_padding_mask);
  f.attn_mask = ToTensor(in.attn_mask);
  f.is_causal = in.is_causal;
  f.need_weights = in.need_weights;
  f.average_attn_weights = in.average_attn_weights;
  f.weights_selection = in.weights_selection;
  if (in.weights_dtype) f.weights_dtype = ToScalarType(*in.weights_dtype);
  f.head_stats = in.head_stats;
  f.head_mask = ToTensor(in.head_mask);
  return f;
}

StepInputs ToStepInputs(const HostInputs& in) {
  StepInputs s;
  s.query = ToTensor(in.query);
  s.key_padding_mask = ToTensor(in.key_padding_mask);
  s.attn_mask = ToTensor(in.attn_mask);
  s.need_weights = in.need_weights;
  s.average_attn_weights = in.average_attn_weights;
  return s;
}

HostOutputs ToHostOutputs(const ForwardOutputs& out, const OutputTypes& types) {
  const ElementType weights = types.weights.value_or(types.output);
  HostOutputs h;
  h.output = ToPlace(out.output, types.output, types.output_place);
  h.attn_weights = ToPlace(out.attn_weights, weights, types.attn_weights_place);
  h.topk_values = ToHost(out.topk_values, weights);
  h.topk_indices = ToHost(out.topk_indices);
  h.head_entropy = ToHost(out.head_entropy);
  h.head_max_weight = ToHost(out.head_max_weight);
  return h;
}

}  // namespace mha
