// mha.v1 ForwardRequest <-> the protocol-neutral InferenceRequest/InferenceResponse. Decoding does
// the wire's own checks only (message size, required query, tensor headers: dtype, dims > 0,
// overflow-checked byte count), then builds tensors; shapes, the model and the limits are
// ServerCore's to validate, once.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>

#include "mha/v1/attention.pb.h"
#include "server/frontends/shm/shm_tensor.h"
#include "server/serving/inference.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

// borrow: the input tensors point into `request`'s bytes (no copy) where alignment allows; the
// request must then outlive the Infer call (true for unary calls, not for a stream's reused
// buffer). Tensors in shared memory (tensor_shm.h) are read from `shm`'s regions into `plan`
// (inputs, then the places of output [0] and attn_weights [1]), which the caller keeps until the
// answer is encoded; without a registry they are refused.
StatusOr<InferenceRequest> DecodeForwardRequest(const v1::ForwardRequest& request,
                                                int64_t max_message_bytes, bool borrow,
                                                const SharedMemoryRegistry* shm = nullptr,
                                                ShmPlan* plan = nullptr);

// Encodes an OK response: output, attn_weights (when need_weights), model, version, timings.
// With `output_bytes`, the output's data is left out of `out` and returned there instead (the
// host tensor to send without a copy: WriteForwardResponse). With `shm` (the decode's plan) the
// input regions are checked intact and output / attn_weights placed in shared memory are written
// there, their tensors carrying the place and no data.
Status EncodeForwardResponse(const InferenceResponse& response, bool need_weights,
                             v1::ForwardResponse* out, HostTensor* output_bytes = nullptr,
                             const ShmPlan* shm = nullptr);

// The unary Forward's answer as raw bytes: EncodeForwardResponse with the output's data borrowed
// from the tensor (server/frontends/common/borrowed_bytes.h), no copy of it in the server.
Status WriteForwardResponse(const InferenceResponse& response, bool need_weights,
                            grpc::ByteBuffer* out, const ShmPlan* shm = nullptr);

// OpenSession's request: size, version length, key and value both or neither, tensor headers.
// Shapes against the model are ServerCore's to check.
StatusOr<OpenSessionRequest> DecodeOpenSessionRequest(const v1::OpenSessionRequest& request,
                                                      int64_t max_message_bytes);

v1::ModelState ToProtoState(ModelState state);

// Metadata of one model version for ListModels/GetModel.
void FillModelInfo(const ModelEntry& entry, bool is_default, v1::ModelInfo* info);

}  // namespace mha::serve
