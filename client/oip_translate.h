// mha.v1 messages <-> Open Inference Protocol messages on the client side, so that `mha-client
// forward|bench --protocol oip` send the same request through inference.GRPCInferenceService.
// The mapping is the server's (server/frontends/oip/README.md): inputs
// query/key/value/key_padding_mask/ attn_mask in raw_input_contents, parameters
// is_causal/need_weights/average_attn_weights, outputs output (+ attn_weights) in
// raw_output_contents, queue_us/compute_us as response parameters. Torch-free, like the rest of
// mha_client.
#pragma once

#include "inference/grpc_service.pb.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"

namespace mha::client {

// INVALID_ARGUMENT for what the protocol cannot carry: output_dtype (outputs come in the model's
// dtype), a tensor of an unknown dtype; and for the head options (weights_*, head_stats,
// head_mask), which the server accepts as parameters but this translation does not send yet.
StatusOr<inference::ModelInferRequest> ToModelInferRequest(const v1::ForwardRequest& request);

// The response as a ForwardResponse (tensors, model, version, queue_us, compute_us).
// INVALID_ARGUMENT when an output's datatype, shape and bytes disagree.
StatusOr<v1::ForwardResponse> FromModelInferResponse(const inference::ModelInferResponse& response);

}  // namespace mha::client
