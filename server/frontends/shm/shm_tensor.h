// Shared-memory tensors, protocol-neutral: the rules of Triton's shared-memory tensor parameters
// (a region and its byte size together, offset default 0, no contents beside a region, an input's
// byte size exactly the tensor's, an output region large enough), with their codes and messages,
// for every front end that lets a tensor name a registered region (shared_memory_registry.h):
// the Open Inference Protocol's parameters (oip/infer_shm.h) and mha.v1's Tensor.shared_memory
// (grpc_v1/tensor_shm.h). A front end reads its own wire fields into ShmFields and calls these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mha/host_io.h"
#include "mha/host_tensor.h"
#include "mha/status.h"
#include "server/frontends/shm/shared_memory_registry.h"

namespace mha::serve {

struct ShmRef {
  std::string region;
  uint64_t byte_size = 0;
  uint64_t offset = 0;
};

// A tensor's shared-memory fields as its wire carried them (absent = nullptr / nullopt).
struct ShmFields {
  const std::string* region = nullptr;
  std::optional<uint64_t> byte_size;
  std::optional<uint64_t> offset;
};

// The tensor's place, or nullopt when it names none. INVALID_ARGUMENT naming `field` for a byte
// size or offset without a region and a region without its byte size. `where` is how the wire
// names the fields' holder: "parameters." (Open Inference Protocol), "shared_memory." (mha.v1).
StatusOr<std::optional<ShmRef>> ResolveShmRef(const ShmFields& fields, const std::string& field,
                                              const std::string& where);

// INVALID_ARGUMENT: in-band bytes (`contents`: the wire's name for them) beside a region.
Status ContentsWithRegion(const std::string& field, const std::string& contents,
                          const std::string& region);

// INVALID_ARGUMENT: a tensor names a region on an endpoint without a registry.
Status NoShmRegistry(const std::string& field);

// What a request holds of shared memory until it is answered.
struct ShmPlan {
  std::vector<ShmSlice> inputs;
  std::vector<std::optional<ShmSlice>> outputs;  // by the call's output index; empty = none
  bool empty() const { return inputs.empty() && outputs.empty(); }
};

// An input in shared memory: its byte size checked against the tensor's (`dtype`: a v1::DataType
// value, `dtype_name` as the wire spells it), the slice of the region taken, then the tensor
// borrowing the mapping (`out`); the slice joins plan->inputs.
Status AcquireShmInput(const std::string& field, const ShmRef& ref, int dtype,
                       const std::vector<int64_t>& shape, const std::string& dtype_name,
                       const SharedMemoryRegistry* registry, ShmPlan* plan, HostTensor* out);

// An output's place: the slice of the region (the output's size is checked when it is written).
StatusOr<ShmSlice> AcquireShmOutput(const std::string& field, const ShmRef& ref,
                                    const SharedMemoryRegistry* registry);

// After the forward pass: every input region still intact (ShmSlice::Check).
Status CheckShmInputs(const ShmPlan& plan);

// Writes `tensor` into `slot` (INVALID_ARGUMENT when it does not fit; `dtype_name` as the wire
// spells the tensor's type) and checks the region is intact afterwards. A CUDA slot: nothing to do
// when the core wrote the tensor there (PlaceOnDevice), else a host-to-device copy.
// An input in a CUDA region (AcquireShmInput) becomes a HostTensor::DeviceView; its offset must be
// a multiple of the element size.
Status WriteShmTensor(const HostTensor& tensor, const ShmSlice& slot, const std::string& name,
                      const std::string& dtype_name);

// An output place in a CUDA region -> the DevicePlace the core writes it into (device to
// device); nothing for a system region or none.
void PlaceOnDevice(const std::optional<ShmSlice>& slot, DevicePlace* place);

}  // namespace mha::serve
