// mha.v1 LayerStepRequest / LayerStepResponse <-> the protocol-neutral LayerStepRequest /
// LayerStepResponse (server/serving/layer_step.h). Decoding does
// the wire's own checks only (message size, version length, session ids, tensor headers, dtypes);
// shapes, layers, sessions and limits are ServerCore's to validate, once.
#pragma once

#include <cstdint>

#include "mha/v1/attention.pb.h"
#include "server/frontends/shm/shm_tensor.h"
#include "server/serving/layer_step.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

// borrow: the hidden tensors point into `request`'s bytes (no copy) where alignment allows; the
// request must then outlive the step. Hidden states in shared memory (tensor_shm.h) are read from
// `shm`'s regions into `plan`, and plan->outputs[i] is where entry i's output goes (when its
// output_shared_memory names a place); the caller keeps the plan until the answer is encoded.
StatusOr<LayerStepRequest> DecodeLayerStepRequest(const v1::LayerStepRequest& request,
                                                  int64_t max_message_bytes, bool borrow,
                                                  const SharedMemoryRegistry* shm = nullptr,
                                                  ShmPlan* plan = nullptr);

// The answer to `request`: its id and layer, then the outputs (those placed in shared memory by
// `shm` written there, their tensors without data), layer lengths, model, timings, or (not OK)
// the error's code and message.
Status EncodeLayerStepResponse(const v1::LayerStepRequest& request,
                               const LayerStepResponse& response, v1::LayerStepResponse* out,
                               const ShmPlan* shm = nullptr);

// The answer to a message that failed before (or while) it was run.
void EncodeLayerStepError(const v1::LayerStepRequest& request, const Status& status,
                          v1::LayerStepResponse* out);

}  // namespace mha::serve
