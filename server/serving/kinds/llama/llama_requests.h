// The serving core's checks of requests to Llama-family models (docs/afd.md), done once before a
// request reaches a scheduler: INVALID_ARGUMENT naming the field, RESOURCE_EXHAUSTED naming the
// limit, with the numbers. Torch-free (shapes from LlamaModelInfo, tensors as HostTensor).
#pragma once

#include <string>

#include "mha/llama_engine.h"
#include "server/serving/inference.h"
#include "server/serving/inference_server.h"
#include "server/serving/layer_step.h"
#include "server/serving/limits.h"

namespace mha::serve {

// A READY Llama version as its checks see it.
struct LlamaVersion {
  std::string name, version;
  LlamaModelInfo info;
};

// A stateless Forward to a Llama version: layer in range, query [B, T, E] floating, no key/value,
// masks, need_weights or head options (each refused by name; is_causal is implied), B and T within
// the limits and T within the model's positions, the pass's working memory and response within
// --max-work-bytes / --max-response-bytes.
Status ValidateLlamaForward(const LlamaVersion& version, const InferenceRequest& request,
                            const RequestLimits& limits);

// A step message to Llama version `entry`: model/model_version (when set) name it, at least one
// entry, layer in range, each entries[i].hidden [t, E] floating with t within
// --max-sequence-length, no session twice, the pass's working memory within --max-work-bytes
// (the projections of every row, and one entry's attention at a time over as many keys as a
// session may reach).
Status CheckLayerStep(const LlamaVersion& version, const LayerStepRequest& request,
                      const RequestLimits& limits);

}  // namespace mha::serve
