// Small tensor conversions shared by the model and the batcher (one definition each).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "mha/options.h"
#include "mha/status.h"

namespace mha {

// float32 -> kFloat, float16 -> kHalf, bfloat16 -> kBFloat16.
at::ScalarType ToScalarType(DType dtype);

// A mask made additive in `dtype` on `device`: bool true -> -inf (false -> 0), a float mask is
// cast (it is additive already). The conversion PyTorch 2.x applies before summing masks.
at::Tensor ToAdditiveMask(const at::Tensor& mask, at::ScalarType dtype, c10::Device device);

// Rows [N_i, ...] concatenated into [sum N_i, ...] on `device` in `dtype`. Rows that share a
// device and dtype are joined where they are and moved once (host rows of a GPU pass: one copy
// instead of one per tensor); mixed ones are moved one by one first.
at::Tensor JoinRows(std::vector<at::Tensor> rows, c10::Device device, at::ScalarType dtype);

// "cpu", "cuda", "cuda:N" or "auto" (CUDA when present) as a device: FAILED_PRECONDITION when
// the CUDA device is not there, INVALID_ARGUMENT for another name. "cuda" means "cuda:0".
StatusOr<c10::Device> ResolveDevice(const std::string& name);

}  // namespace mha
