#include "mha/tensor_util.h"

#include <ATen/ATen.h>

#include <limits>

#include "mha/device_stream.h"

namespace mha {

at::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return at::kFloat;
    case DType::kFloat16:
      return at::kHalf;
    case DType::kBFloat16:
      return at::kBFloat16;
  }
  return at::kFloat;
}

at::Tensor JoinRows(std::vector<at::Tensor> rows, c10::Device device, at::ScalarType dtype) {
  const at::Tensor& first = rows.front();
  for (const at::Tensor& r : rows) {
    if (r.device() != first.device() || r.scalar_type() != first.scalar_type()) {
      for (at::Tensor& each : rows) each = each.to(device, dtype);
      break;
    }
  }
  // Host rows reach a device without a wait (the step's stream may hold other work), then are
  // cast there.
  return CopyToDeviceQueued(rows.size() == 1 ? rows.front() : at::cat(rows, 0), device).to(dtype);
}

at::Tensor ToAdditiveMask(const at::Tensor& mask, at::ScalarType dtype, c10::Device device) {
  const at::Tensor on_device = mask.to(device);
  if (mask.scalar_type() == at::kBool) {
    return at::zeros(mask.sizes(), at::TensorOptions().dtype(dtype).device(device))
        .masked_fill_(on_device, -std::numeric_limits<double>::infinity());
  }
  return on_device.to(dtype);
}

StatusOr<c10::Device> ResolveDevice(const std::string& name) {
  if (name == "auto") return at::hasCUDA() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  try {
    c10::Device device(name);
    if (device.is_cuda()) {
      if (!at::hasCUDA()) {
        return FailedPrecondition("device '" + name +
                                  "' requested but this LibTorch has no CUDA device available");
      }
      if (!device.has_index()) device.set_index(0);
      if (static_cast<size_t>(device.index()) >= at::getNumGPUs()) {
        return FailedPrecondition("device '" + name + "' requested but only " +
                                  std::to_string(at::getNumGPUs()) + " CUDA device(s) are visible");
      }
    } else if (!device.is_cpu()) {
      return InvalidArgument("device '" + name + "' is not supported (cpu, cuda, cuda:N, auto)");
    }
    return device;
  } catch (const c10::Error&) {
    return InvalidArgument("device '" + name + "' is not a device name (cpu, cuda, cuda:N, auto)");
  }
}

}  // namespace mha
