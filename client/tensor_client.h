// The at::Tensor layer over mha_client: ForwardInputs in, at::Tensor (CPU) out, through the
// core's tensor adapter (mha/tensor_adapter.h) and the wire's torch-free codec.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "client/mha_client.h"
#include "mha/forward_io.h"

namespace mha::client {

struct ForwardOptions {
  std::string model;                         // "" = the server's default model
  std::string model_version;                 // "" = the model's newest READY version
  std::optional<bool> average_attn_weights;  // unset = server default (true, as PyTorch)
  v1::DataType output_dtype = v1::DATA_TYPE_UNSPECIFIED;
  std::optional<std::chrono::milliseconds> timeout;  // unset = ClientOptions::timeout
  std::string request_id;                            // sent as x-request-id when not empty
  std::string session_id{};  // a decoding session's step: the inputs hold only the new tokens
};

// OpenSession's parameters (docs/sessions.md).
struct SessionOpenOptions {
  std::string model;          // "" = the server's default model
  std::string model_version;  // "" = the newest READY version (the session stays on it)
  int64_t batch_size = 1;
  int64_t max_tokens = 0;  // 0 = the server's --max-sequence-length
  at::Tensor key, value;   // both: a cross-attention session over these encoder states
};

struct ForwardResult {
  at::Tensor output;                         // [B, T, E]
  at::Tensor attn_weights;                   // undefined unless need_weights (and no top-k)
  at::Tensor topk_values, topk_indices;      // weights_top_k > 0
  at::Tensor head_entropy, head_max_weight;  // head_stats: [B, H, T]
  std::string model;
  std::string model_version;
  std::string request_id;  // echoed by the server (initial metadata)
  int64_t queue_us = 0;
  int64_t compute_us = 0;
  int64_t session_tokens = 0;  // a session step: tokens per row in the session after it
};

// ForwardInputs (flags included: is_causal, need_weights, average_attn_weights, the weights
// selection, weights_dtype, head_stats, head_mask) -> request.
// average_attn_weights is always sent explicitly; options.average_attn_weights overrides it.
StatusOr<v1::ForwardRequest> MakeForwardRequest(const ForwardInputs& inputs,
                                                const ForwardOptions& options);
StatusOr<ForwardResult> ParseForwardResponse(const v1::ForwardResponse& response);

class TensorClient : public AttentionClient {
 public:
  using AttentionClient::AttentionClient;
  using AttentionClient::OpenSession;

  StatusOr<ForwardResult> Forward(const ForwardInputs& inputs, const ForwardOptions& options = {});
  StatusOr<std::vector<ForwardResult>> ForwardStream(const std::vector<ForwardInputs>& inputs,
                                                     const ForwardOptions& options = {});

  // Decoding sessions: Open, then Step with the new tokens (query [B, T_new, E], masks over the
  // whole cache), then Close.
  StatusOr<v1::OpenSessionResponse> OpenSession(const SessionOpenOptions& options);
  StatusOr<ForwardResult> Step(const std::string& session_id, const ForwardInputs& new_tokens,
                               ForwardOptions options = {});
};

}  // namespace mha::client
