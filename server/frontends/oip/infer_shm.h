// Triton's shared-memory tensor parameters on ModelInfer (the system shared-memory extension;
// regions are registered in shm/shared_memory_registry.h): an input or a requested output
// names a region instead of carrying bytes.
//
//   shared_memory_region     string_param: a registered region
//   shared_memory_byte_size  int64_param (or uint64_param): the tensor's bytes in the region
//   shared_memory_offset     int64_param (or uint64_param), default 0: where they start
//
// An input is read from the mapping in place (the tensor borrows it; the request holds the
// region until it is answered); its byte size must be the tensor's. An output is written into
// the region after the forward pass; the region's byte size must hold it, and the response
// carries the output's name, datatype, shape and these parameters (shared_memory_byte_size = the
// bytes written), with an empty raw_output_contents entry in its place, as Triton answers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "mha/host_tensor.h"
#include "mha/status.h"
#include "server/frontends/shm/shared_memory_registry.h"
#include "server/frontends/shm/shm_tensor.h"

namespace mha::serve::oip {

inline constexpr char kShmRegion[] = "shared_memory_region";
inline constexpr char kShmByteSize[] = "shared_memory_byte_size";
inline constexpr char kShmOffset[] = "shared_memory_offset";

bool IsShmParameter(const std::string& name);

using TensorParameters = google::protobuf::Map<std::string, inference::InferParameter>;

// The tensor's shared-memory parameters; nullopt when it has none. INVALID_ARGUMENT naming
// `field` for a region without its byte size, a byte size or offset without a region, a
// parameter of the wrong kind or a negative one.
StatusOr<std::optional<ShmRef>> ShmParameters(const TensorParameters& parameters,
                                              const std::string& field);

// An input in shared memory: the slice of the region (registry->Acquire), its byte size checked
// against the tensor's, then the tensor borrowing it (`out`); the slice joins plan->inputs.
Status DecodeShmInput(const inference::ModelInferRequest::InferInputTensor& t, const ShmRef& ref,
                      const SharedMemoryRegistry* registry, ShmPlan* plan, HostTensor* out);

// The requested outputs that name a region: plan->outputs[i] for the call's output i named
// `names[i]`.
Status PlaceShmOutputs(const inference::ModelInferRequest& request,
                       const std::vector<std::string>& names, const SharedMemoryRegistry* registry,
                       ShmPlan* plan);

// Writes `tensor` into `slot` (INVALID_ARGUMENT when it does not fit), checks the region is
// intact afterwards, and fills `meta`'s parameters.
Status WriteShmOutput(const HostTensor& tensor, const ShmSlice& slot, const std::string& name,
                      inference::ModelInferResponse::InferOutputTensor* meta);

}  // namespace mha::serve::oip
