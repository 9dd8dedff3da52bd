#include "forward_request.h"

#include <ATen/ATen.h>

#include <utility>

#include "tensor_codec.h"

namespace mha::serve {
namespace {

using codec::ShapeOf;
using codec::ShapeString;

Status CheckFloating(const v1::Tensor& t, const char* field) {
  if (t.dtype() == v1::BOOL) {
    return InvalidArgument(std::string(field) +
                           ": dtype bool is not allowed (use FLOAT32, FLOAT16 or BFLOAT16)");
  }
  return Status::Ok();
}

Status CheckRank3(const v1::Tensor& t, const char* field, const char* dims) {
  if (t.shape_size() != 3) {
    return InvalidArgument(std::string(field) + ": expected rank 3 " + dims + ", got shape " +
                           ShapeString(ShapeOf(t)) + " (rank " + std::to_string(t.shape_size()) +
                           ")");
  }
  return Status::Ok();
}

Status CheckLimits(const v1::ForwardRequest& r, const RequestLimits& limits) {
  const int64_t b = r.query().shape(0);
  if (b > limits.max_batch_size) {
    return ResourceExhausted("query: batch size " + std::to_string(b) +
                             " exceeds --max-batch-size " + std::to_string(limits.max_batch_size));
  }
  auto check_length = [&](const char* field, int64_t length) {
    if (length <= limits.max_sequence_length) return Status::Ok();
    return ResourceExhausted(std::string(field) + ": sequence length " + std::to_string(length) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  };
  MHA_RETURN_IF_ERROR(check_length("query", r.query().shape(1)));
  if (r.has_key()) {
    MHA_RETURN_IF_ERROR(check_length("key", r.key().shape(1)));
    MHA_RETURN_IF_ERROR(check_length("value", r.value().shape(1)));
  }
  return Status::Ok();
}

// Header checks of every present tensor, before anything is decoded.
Status CheckTensors(const v1::ForwardRequest& r) {
  if (!r.has_query()) return InvalidArgument("query: required");
  MHA_RETURN_IF_ERROR(codec::CheckTensor(r.query(), "query"));
  MHA_RETURN_IF_ERROR(CheckFloating(r.query(), "query"));
  MHA_RETURN_IF_ERROR(CheckRank3(r.query(), "query", "[B, T, E]"));
  if (r.has_key() != r.has_value()) {
    return InvalidArgument(r.has_key() ? "value: required when key is given (both or neither)"
                                       : "key: required when value is given (both or neither)");
  }
  if (r.has_key()) {
    MHA_RETURN_IF_ERROR(codec::CheckTensor(r.key(), "key"));
    MHA_RETURN_IF_ERROR(CheckFloating(r.key(), "key"));
    MHA_RETURN_IF_ERROR(CheckRank3(r.key(), "key", "[B, S, kdim]"));
    MHA_RETURN_IF_ERROR(codec::CheckTensor(r.value(), "value"));
    MHA_RETURN_IF_ERROR(CheckFloating(r.value(), "value"));
    MHA_RETURN_IF_ERROR(CheckRank3(r.value(), "value", "[B, S, vdim]"));
  }
  if (r.has_key_padding_mask()) {
    MHA_RETURN_IF_ERROR(codec::CheckTensor(r.key_padding_mask(), "key_padding_mask"));
  }
  if (r.has_attn_mask()) MHA_RETURN_IF_ERROR(codec::CheckTensor(r.attn_mask(), "attn_mask"));
  return Status::Ok();
}

Status Decode(const v1::Tensor& t, const char* field, bool borrow, at::Tensor* out) {
  auto decoded = codec::DecodeTensor(t, field, borrow);
  if (!decoded.ok()) return decoded.status();
  *out = std::move(decoded.value());
  return Status::Ok();
}

}  // namespace

StatusOr<PreparedForward> PrepareForward(const v1::ForwardRequest& r,
                                         const ModelRepository* repository,
                                         const RequestLimits& limits, bool borrow) {
  const size_t bytes = r.ByteSizeLong();
  if (static_cast<int64_t>(bytes) > limits.max_message_bytes) {
    return ResourceExhausted("request is " + std::to_string(bytes) +
                             " bytes, over --max-message-bytes " +
                             std::to_string(limits.max_message_bytes));
  }
  if (repository == nullptr) return Unavailable("models are still loading");
  auto entry = repository->Resolve(r.model());
  if (!entry.ok()) return entry.status();

  MHA_RETURN_IF_ERROR(CheckTensors(r));
  MHA_RETURN_IF_ERROR(CheckLimits(r, limits));

  PreparedForward p;
  p.entry = std::move(entry.value());
  const MhaModel& model = *p.entry->model;
  if (r.output_dtype() == v1::DATA_TYPE_UNSPECIFIED) {
    p.output_dtype = codec::ToProtoDType(model.options().dtype);
  } else {
    auto dtype = codec::FromProtoDType(r.output_dtype());
    if (!dtype.ok()) return InvalidArgument("output_dtype: " + dtype.status().message());
    p.output_dtype = r.output_dtype();
  }

  ForwardInputs& in = p.inputs;
  MHA_RETURN_IF_ERROR(Decode(r.query(), "query", borrow, &in.query));
  if (r.has_key()) {
    MHA_RETURN_IF_ERROR(Decode(r.key(), "key", borrow, &in.key));
    MHA_RETURN_IF_ERROR(Decode(r.value(), "value", borrow, &in.value));
  }
  if (r.has_key_padding_mask()) {
    MHA_RETURN_IF_ERROR(
        Decode(r.key_padding_mask(), "key_padding_mask", borrow, &in.key_padding_mask));
  }
  if (r.has_attn_mask()) {
    MHA_RETURN_IF_ERROR(Decode(r.attn_mask(), "attn_mask", borrow, &in.attn_mask));
  }
  in.is_causal = r.is_causal();
  in.need_weights = r.need_weights();
  // Unset = PyTorch's default (average over heads).
  in.average_attn_weights = r.has_average_attn_weights() ? r.average_attn_weights() : true;
  MHA_RETURN_IF_ERROR(model.ValidateInputs(in));
  return p;
}

ResponseSpec MakeResponseSpec(const PreparedForward& p) {
  ResponseSpec spec;
  spec.model = p.entry->name;
  spec.version = p.entry->version;
  spec.output_dtype = p.output_dtype;
  spec.need_weights = p.inputs.need_weights;
  return spec;
}

Status BuildResponse(const InferenceResult& result, const ResponseSpec& spec,
                     v1::ForwardResponse* response) {
  if (!result.status.ok()) return result.status;
  MHA_RETURN_IF_ERROR(
      codec::EncodeTensor(result.outputs.output, spec.output_dtype, response->mutable_output()));
  if (spec.need_weights) {
    if (!result.outputs.attn_weights.defined()) {
      return Internal("need_weights was set but the model returned no attention weights");
    }
    MHA_RETURN_IF_ERROR(codec::EncodeTensor(result.outputs.attn_weights, spec.output_dtype,
                                            response->mutable_attn_weights()));
  }
  response->set_model(spec.model);
  response->set_model_version(spec.version);
  response->set_queue_us(result.queue_us);
  response->set_compute_us(result.compute_us);
  return Status::Ok();
}

void FillModelInfo(const ModelEntry& e, bool is_default, v1::ModelInfo* info) {
  info->set_name(e.name);
  info->set_version(e.version);
  switch (e.state) {
    case ModelState::kLoading:
      info->set_state(v1::LOADING);
      break;
    case ModelState::kReady:
      info->set_state(v1::READY);
      break;
    case ModelState::kFailed:
      info->set_state(v1::FAILED);
      break;
  }
  info->set_error(e.error);
  info->set_source(e.source);
  info->set_format(e.format);
  info->set_layout(e.layout);
  info->set_is_default(is_default);
  if (!e.model) return;
  const MhaOptions& o = e.model->options();
  info->set_embed_dim(o.embed_dim);
  info->set_num_heads(o.num_heads);
  info->set_head_dim(o.head_dim());
  info->set_kdim(o.key_dim());
  info->set_vdim(o.value_dim());
  info->set_bias(o.bias);
  info->set_add_bias_kv(o.add_bias_kv);
  info->set_add_zero_attn(o.add_zero_attn);
  info->set_dtype(codec::ToProtoDType(o.dtype));
  info->set_compute_dtype(codec::ToProtoDType(e.model->compute_dtype()));
  info->set_device(e.model->device());
  info->set_parameter_count(e.model->parameter_count());
}

}  // namespace mha::serve
