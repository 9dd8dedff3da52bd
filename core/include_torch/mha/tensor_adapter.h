// The one place host tensors (mha/host_tensor.h: what front ends, the wire codec and the serving
// layer carry) become at::Tensor and back. Inputs are wrapped without a copy where the bytes are
// aligned (at::from_blob; the host tensor's owner lives as long as the ATen tensor); answers are
// cast once, on their device, to the element type the request asked for, then copied to host
// memory that the returned host tensor owns. CUDA shared memory (mha/device_memory.h): a device
// view becomes a CUDA tensor over its bytes (no copy), and an output with a DevicePlace in
// OutputTypes is copied into the place on the device (synchronized) instead of to the host.
#pragma once

#include <ATen/core/Tensor.h>

#include "mha/decode.h"
#include "mha/forward_io.h"
#include "mha/host_io.h"
#include "mha/status.h"

namespace mha {

at::ScalarType ToScalarType(ElementType type);
// INVALID_ARGUMENT for ATen types the wire does not carry (naming them).
StatusOr<ElementType> ToElementType(at::ScalarType type);

// A CPU tensor over `t`'s bytes (a CUDA one for a device view; undefined for an undefined `t`).
// Read-only by contract: callers never write to it. Bytes not aligned to the element size are
// copied.
at::Tensor ToTensor(const HostTensor& t);
// `t` in `type` on the host, contiguous: cast on its own device first (a GPU result is cast
// before it crosses), then copied unless it already is such a CPU tensor. Undefined -> undefined.
HostTensor ToHost(const at::Tensor& t, ElementType type);
HostTensor ToHost(const at::Tensor& t);  // in its own element type (INTERNAL if the wire lacks it)

ForwardInputs ToForwardInputs(const HostInputs& in);
StepInputs ToStepInputs(const HostInputs& in);  // query, masks and the weights flags
// Output and dense weights in `types`; top-k values in the weights' type; indices and head
// statistics as computed (int32/int64, float32).
HostOutputs ToHostOutputs(const ForwardOutputs& out, const OutputTypes& types);

}  // namespace mha
