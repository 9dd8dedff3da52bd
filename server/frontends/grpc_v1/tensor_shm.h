// mha.v1's shared-memory tensors (Tensor.shared_memory, ForwardRequest.output_shared_memory /
// attn_weights_shared_memory, LayerStepEntry.output_shared_memory; docs/shared-memory.md): a
// tensor names a place in a region registered through the Open Inference Protocol's
// SystemSharedMemoryRegister (gRPC or REST: the server has one registry) instead of carrying
// bytes. The rules, codes and messages are shm/shm_tensor.h's, which the Open Inference
// Protocol's tensor parameters use too; only the wire's field names differ
// ("shared_memory.shared_memory_byte_size" here, "parameters.shared_memory_byte_size" there).
#pragma once

#include <optional>
#include <string>

#include "mha/host_tensor.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"
#include "server/frontends/shm/shared_memory_registry.h"
#include "server/frontends/shm/shm_tensor.h"

namespace mha::serve {

// The place `ref` names, or nullopt (an empty SharedMemoryRef names none).
StatusOr<std::optional<ShmRef>> V1ShmRef(const v1::SharedMemoryRef& ref, const std::string& field);

// An input tensor: in-band (codec::DecodeTensor; `borrow` as there), or read in place from its
// region (data must be empty; the slice joins plan->inputs). Without a registry or a plan a
// tensor naming a region is refused.
StatusOr<HostTensor> DecodeV1Tensor(const v1::Tensor& tensor, const std::string& field, bool borrow,
                                    const SharedMemoryRegistry* registry, ShmPlan* plan);

// The place a request names for an output `field` (nullopt: in-band), taken from the registry.
StatusOr<std::optional<ShmSlice>> PlaceV1Output(const v1::SharedMemoryRef& ref,
                                                const std::string& field,
                                                const SharedMemoryRegistry* registry);

// Writes `tensor` into `slot` and fills `out` with its dtype, shape and place (byte size = the
// bytes written), data empty.
Status EncodeV1ShmTensor(const HostTensor& tensor, const ShmSlice& slot, const std::string& field,
                         v1::Tensor* out);

}  // namespace mha::serve
