#include "mha/tensor_util.h"

#include <ATen/ATen.h>

#include <limits>

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

at::Tensor ToAdditiveMask(const at::Tensor& mask, at::ScalarType dtype, c10::Device device) {
  const at::Tensor on_device = mask.to(device);
  if (mask.scalar_type() == at::kBool) {
    return at::zeros(mask.sizes(), at::TensorOptions().dtype(dtype).device(device))
        .masked_fill_(on_device, -std::numeric_limits<double>::infinity());
  }
  return on_device.to(dtype);
}

}  // namespace mha
