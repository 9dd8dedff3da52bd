#include "client/tensor_client.h"

#include <utility>

#include "mha/tensor_adapter.h"
#include "proto/wire/tensor_codec.h"

namespace mha::client {
namespace {

Status Encode(const at::Tensor& t, const char* field, v1::Tensor* out) {
  if (!t.defined()) return Status::Ok();
  auto type = ToElementType(t.scalar_type());
  if (!type.ok()) return InvalidArgument(std::string(field) + ": " + type.status().message());
  const Status s = codec::EncodeTensor(ToHost(t, *type), out);
  if (!s.ok()) return InvalidArgument(std::string(field) + ": " + s.message());
  return s;
}

v1::DataType WireFloatType(at::ScalarType type) {
  return type == at::kHalf ? v1::FLOAT16 : type == at::kBFloat16 ? v1::BFLOAT16 : v1::FLOAT32;
}

Status EncodeHeadOptions(const ForwardInputs& in, v1::ForwardRequest* r) {
  const WeightsSelection& s = in.weights_selection;
  for (int64_t h : s.heads) r->add_weights_heads(h);
  if (s.query_begin) r->set_weights_query_begin(*s.query_begin);
  if (s.query_end) r->set_weights_query_end(*s.query_end);
  r->set_weights_top_k(s.top_k);
  if (s.topk_indices_int64) r->set_weights_topk_indices_dtype(v1::INT64);
  if (in.weights_dtype) r->set_weights_dtype(WireFloatType(*in.weights_dtype));
  r->set_head_stats(in.head_stats);
  if (!in.head_mask.defined()) return Status::Ok();  // mutable_head_mask() would send an empty one
  return Encode(in.head_mask, "head_mask", r->mutable_head_mask());
}

// `field` of the response decoded into *out when present.
Status DecodeIfPresent(bool present, const v1::Tensor& t, const char* field, at::Tensor* out) {
  if (!present) return Status::Ok();
  auto decoded = codec::DecodeTensor(t, field);
  if (!decoded.ok()) return Internal(decoded.status().message());
  *out = ToTensor(*decoded);  // over the decoded copy, which the tensor keeps alive
  return Status::Ok();
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
  MHA_RETURN_IF_ERROR(EncodeHeadOptions(in, &r));
  if (!options.session_id.empty()) r.set_session_id(options.session_id);
  return r;
}

StatusOr<ForwardResult> ParseForwardResponse(const v1::ForwardResponse& response) {
  ForwardResult result;
  if (!response.has_output()) return Internal("response without output");
  auto output = codec::DecodeTensor(response.output(), "output");
  if (!output.ok()) return Internal(output.status().message());
  result.output = ToTensor(*output);
  const v1::ForwardResponse& r = response;
  MHA_RETURN_IF_ERROR(DecodeIfPresent(r.has_attn_weights(), r.attn_weights(), "attn_weights",
                                      &result.attn_weights));
  MHA_RETURN_IF_ERROR(DecodeIfPresent(r.has_attn_weights_topk_values(),
                                      r.attn_weights_topk_values(), "attn_weights_topk_values",
                                      &result.topk_values));
  MHA_RETURN_IF_ERROR(DecodeIfPresent(r.has_attn_weights_topk_indices(),
                                      r.attn_weights_topk_indices(), "attn_weights_topk_indices",
                                      &result.topk_indices));
  MHA_RETURN_IF_ERROR(DecodeIfPresent(r.has_head_entropy(), r.head_entropy(), "head_entropy",
                                      &result.head_entropy));
  MHA_RETURN_IF_ERROR(DecodeIfPresent(r.has_head_max_weight(), r.head_max_weight(),
                                      "head_max_weight", &result.head_max_weight));
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
