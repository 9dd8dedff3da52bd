#include "client/tensor_client.h"

#include <utility>

#include "wire/tensor_codec.h"

namespace mha::client {
namespace {

Status Encode(const at::Tensor& t, const char* field, v1::Tensor* out) {
  if (!t.defined()) return Status::Ok();
  const Status s = codec::EncodeTensor(t, v1::DATA_TYPE_UNSPECIFIED, out);
  if (!s.ok()) return InvalidArgument(std::string(field) + ": " + s.message());
  return s;
}

}  // namespace

StatusOr<v1::ForwardRequest> MakeForwardRequest(const ForwardInputs& in,
                                                const ForwardOptions& options) {
  v1::ForwardRequest r;
  r.set_model(options.model);
  r.set_model_version(options.model_version);
  MHA_RETURN_IF_ERROR(Encode(in.query, "query", r.mutable_query()));
  if (in.key.defined()) MHA_RETURN_IF_ERROR(Encode(in.key, "key", r.mutable_key()));
  if (in.value.defined()) MHA_RETURN_IF_ERROR(Encode(in.value, "value", r.mutable_value()));
  if (in.key_padding_mask.defined()) {
    MHA_RETURN_IF_ERROR(
        Encode(in.key_padding_mask, "key_padding_mask", r.mutable_key_padding_mask()));
  }
  if (in.attn_mask.defined()) {
    MHA_RETURN_IF_ERROR(Encode(in.attn_mask, "attn_mask", r.mutable_attn_mask()));
  }
  r.set_is_causal(in.is_causal);
  r.set_need_weights(in.need_weights);
  r.set_average_attn_weights(options.average_attn_weights.value_or(in.average_attn_weights));
  r.set_output_dtype(options.output_dtype);
  if (!options.session_id.empty()) r.set_session_id(options.session_id);
  return r;
}

StatusOr<ForwardResult> ParseForwardResponse(const v1::ForwardResponse& response) {
  ForwardResult result;
  if (!response.has_output()) return Internal("response without output");
  auto output = codec::DecodeTensor(response.output(), "output");
  if (!output.ok()) return Internal(output.status().message());
  result.output = std::move(output.value());
  if (response.has_attn_weights()) {
    auto weights = codec::DecodeTensor(response.attn_weights(), "attn_weights");
    if (!weights.ok()) return Internal(weights.status().message());
    result.attn_weights = std::move(weights.value());
  }
  result.model = response.model();
  result.model_version = response.model_version();
  result.queue_us = response.queue_us();
  result.compute_us = response.compute_us();
  result.session_tokens = response.session_tokens();
  return result;
}

StatusOr<v1::OpenSessionResponse> TensorClient::OpenSession(const SessionOpenOptions& options) {
  v1::OpenSessionRequest request;
  request.set_model(options.model);
  request.set_model_version(options.model_version);
  request.set_batch_size(options.batch_size);
  request.set_max_tokens(options.max_tokens);
  if (options.key.defined()) MHA_RETURN_IF_ERROR(Encode(options.key, "key", request.mutable_key()));
  if (options.value.defined()) {
    MHA_RETURN_IF_ERROR(Encode(options.value, "value", request.mutable_value()));
  }
  return AttentionClient::OpenSession(request);
}

StatusOr<ForwardResult> TensorClient::Step(const std::string& session_id,
                                           const ForwardInputs& new_tokens,
                                           ForwardOptions options) {
  options.session_id = session_id;
  return Forward(new_tokens, options);
}

StatusOr<ForwardResult> TensorClient::Forward(const ForwardInputs& inputs,
                                              const ForwardOptions& options) {
  auto request = MakeForwardRequest(inputs, options);
  if (!request.ok()) return request.status();
  std::string request_id = options.request_id;
  auto response = ForwardRaw(*request, options.timeout, &request_id);
  if (!response.ok()) return response.status();
  auto result = ParseForwardResponse(*response);
  if (result.ok()) result->request_id = request_id;
  return result;
}

StatusOr<std::vector<ForwardResult>> TensorClient::ForwardStream(
    const std::vector<ForwardInputs>& inputs, const ForwardOptions& options) {
  std::vector<v1::ForwardRequest> requests;
  requests.reserve(inputs.size());
  for (const auto& in : inputs) {
    auto request = MakeForwardRequest(in, options);
    if (!request.ok()) return request.status();
    requests.push_back(std::move(request.value()));
  }
  std::vector<v1::ForwardResponse> responses;
  MHA_RETURN_IF_ERROR(ForwardStreamRaw(requests, &responses, options.timeout));
  std::vector<ForwardResult> results;
  for (const auto& response : responses) {
    auto result = ParseForwardResponse(response);
    if (!result.ok()) return result.status();
    results.push_back(std::move(result.value()));
  }
  return results;
}

}  // namespace mha::client
