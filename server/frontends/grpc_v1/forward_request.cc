#include "server/frontends/grpc_v1/forward_request.h"

#include <string_view>
#include <utility>

#include "proto/wire/tensor_codec.h"
#include "server/frontends/common/borrowed_bytes.h"
#include "server/frontends/common/request_limits.h"
#include "server/frontends/grpc_v1/head_options.h"
#include "server/frontends/grpc_v1/layer_step_wire.h"
#include "server/frontends/grpc_v1/tensor_shm.h"

namespace mha::serve {
namespace {

// How a request's tensors are read: borrowing its bytes, and from which shared-memory registry
// (null: a tensor naming a region is refused) into which plan.
struct TensorSource {
  bool borrow = false;
  const SharedMemoryRegistry* shm = nullptr;
  ShmPlan* plan = nullptr;
};

Status Decode(const v1::Tensor& t, const char* field, const TensorSource& from, HostTensor* out) {
  const bool is_mask = std::string_view(field).find("mask") != std::string_view::npos;
  if (!is_mask && t.dtype() == v1::BOOL) {  // the wire contract: only masks may be BOOL
    return InvalidArgument(std::string(field) +
                           ": dtype bool is not allowed (use FLOAT32, FLOAT16 or BFLOAT16)");
  }
  if (t.dtype() == v1::INT32 || t.dtype() == v1::INT64) {  // response-only dtypes
    return InvalidArgument(std::string(field) + ": dtype " + codec::DataTypeName(t.dtype()) +
                           " is not allowed (use FLOAT32, FLOAT16, BFLOAT16" +
                           (is_mask ? " or BOOL)" : ")"));
  }
  auto decoded = DecodeV1Tensor(t, field, from.borrow, from.shm, from.plan);
  if (!decoded.ok()) return decoded.status();
  *out = std::move(decoded.value());
  return Status::Ok();
}

Status DecodeInputs(const v1::ForwardRequest& r, const TensorSource& from, HostInputs* in) {
  if (!r.has_query()) return InvalidArgument("query: required");
  MHA_RETURN_IF_ERROR(Decode(r.query(), "query", from, &in->query));
  if (r.has_key()) MHA_RETURN_IF_ERROR(Decode(r.key(), "key", from, &in->key));
  if (r.has_value()) MHA_RETURN_IF_ERROR(Decode(r.value(), "value", from, &in->value));
  if (r.has_key_padding_mask()) {
    MHA_RETURN_IF_ERROR(
        Decode(r.key_padding_mask(), "key_padding_mask", from, &in->key_padding_mask));
  }
  if (r.has_attn_mask()) {
    MHA_RETURN_IF_ERROR(Decode(r.attn_mask(), "attn_mask", from, &in->attn_mask));
  }
  in->is_causal = r.is_causal();
  in->need_weights = r.need_weights();
  // Unset = PyTorch's default (average over heads).
  in->average_attn_weights = r.has_average_attn_weights() ? r.average_attn_weights() : true;
  return DecodeHeadOptions(r, from.borrow, in);
}

// The places the request names for output (plan->outputs[0]) and attn_weights ([1]).
// One in a CUDA region becomes the input's DevicePlace: the core writes it there device to device.
Status PlaceOutputs(const v1::ForwardRequest& r, HostInputs& in, const TensorSource& from) {
  if (!r.has_output_shared_memory() && !r.has_attn_weights_shared_memory()) return Status::Ok();
  auto output = PlaceV1Output(r.output_shared_memory(), "output", from.shm);
  if (!output.ok()) return output.status();
  auto weights = PlaceV1Output(r.attn_weights_shared_memory(), "attn_weights", from.shm);
  if (!weights.ok()) return weights.status();
  if (weights->has_value() && (!in.need_weights || in.weights_selection.top_k > 0)) {
    return InvalidArgument(
        "attn_weights_shared_memory: needs need_weights and dense weights (weights_top_k "
        "answers attn_weights_topk_values, in-band)");
  }
  if (!output->has_value() && !weights->has_value()) return Status::Ok();
  if (from.plan == nullptr) return NoShmRegistry(output->has_value() ? "output" : "attn_weights");
  from.plan->outputs = {std::move(output.value()), std::move(weights.value())};
  PlaceOnDevice(from.plan->outputs[0], &in.output_place);
  PlaceOnDevice(from.plan->outputs[1], &in.attn_weights_place);
  return Status::Ok();
}

const ShmSlice* OutputSlot(const ShmPlan* shm, size_t index) {
  if (shm == nullptr || index >= shm->outputs.size() || !shm->outputs[index]) return nullptr;
  return &*shm->outputs[index];
}

}  // namespace

StatusOr<InferenceRequest> DecodeForwardRequest(const v1::ForwardRequest& r,
                                                int64_t max_message_bytes, bool borrow,
                                                const SharedMemoryRegistry* shm, ShmPlan* plan) {
  MHA_RETURN_IF_ERROR(CheckMessageBytes(r.ByteSizeLong(), max_message_bytes));
  InferenceRequest request;
  request.model = r.model();
  MHA_RETURN_IF_ERROR(CheckModelVersion(r.model_version()));
  request.model_version = r.model_version();
  request.session_id = r.session_id();
  request.layer = r.layer();
  if (r.output_dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    auto dtype = codec::FromProtoDType(r.output_dtype());
    if (!dtype.ok()) return InvalidArgument("output_dtype: " + dtype.status().message());
    request.output_dtype = *dtype;
  }
  const TensorSource from{borrow, shm, plan};
  MHA_RETURN_IF_ERROR(DecodeInputs(r, from, &request.inputs));
  MHA_RETURN_IF_ERROR(PlaceOutputs(r, request.inputs, from));
  return request;
}

Status EncodeForwardResponse(const InferenceResponse& r, bool need_weights,
                             v1::ForwardResponse* out, HostTensor* output_bytes,
                             const ShmPlan* shm) {
  if (!r.status.ok()) return r.status;
  if (shm != nullptr) MHA_RETURN_IF_ERROR(CheckShmInputs(*shm));  // read intact by the core
  const ShmSlice* output_slot = OutputSlot(shm, 0);
  if (output_slot != nullptr) {
    MHA_RETURN_IF_ERROR(
        EncodeV1ShmTensor(r.outputs.output, *output_slot, "output", out->mutable_output()));
  } else if (output_bytes != nullptr) {
    MHA_RETURN_IF_ERROR(codec::EncodeTensorHeader(r.outputs.output, out->mutable_output()));
    *output_bytes = r.outputs.output;
  } else {
    MHA_RETURN_IF_ERROR(codec::EncodeTensor(r.outputs.output, out->mutable_output()));
  }
  if (need_weights && !r.outputs.attn_weights.defined() && !r.outputs.topk_values.defined()) {
    return Internal("need_weights was set but the model returned no attention weights");
  }
  HostOutputs in_band = r.outputs;
  if (const ShmSlice* weights_slot = OutputSlot(shm, 1); weights_slot != nullptr) {
    MHA_RETURN_IF_ERROR(EncodeV1ShmTensor(r.outputs.attn_weights, *weights_slot, "attn_weights",
                                          out->mutable_attn_weights()));
    in_band.attn_weights = HostTensor();
  }
  MHA_RETURN_IF_ERROR(EncodeHeadOutputs(in_band, out));  // in the types the core cast them to
  out->set_model(r.model);
  out->set_model_version(r.model_version);
  out->set_queue_us(r.queue_us);
  out->set_compute_us(r.compute_us);
  if (r.session_tokens >= 0) out->set_session_tokens(r.session_tokens);
  return Status::Ok();
}

Status WriteForwardResponse(const InferenceResponse& r, bool need_weights, grpc::ByteBuffer* out,
                            const ShmPlan* shm) {
  v1::ForwardResponse head;
  HostTensor output;
  MHA_RETURN_IF_ERROR(EncodeForwardResponse(r, need_weights, &head, &output, shm));
  if (!output.defined()) return SerializeWithBorrowedBytes(head, {}, out);  // in shared memory
  constexpr int kOutput = v1::ForwardResponse::kOutputFieldNumber;
  constexpr int kData = v1::Tensor::kDataFieldNumber;
  return SerializeWithBorrowedBytes(head, {BorrowedField{{kOutput, kData}, std::move(output)}},
                                    out);
}

StatusOr<OpenSessionRequest> DecodeOpenSessionRequest(const v1::OpenSessionRequest& r,
                                                      int64_t max_message_bytes) {
  MHA_RETURN_IF_ERROR(CheckMessageBytes(r.ByteSizeLong(), max_message_bytes));
  MHA_RETURN_IF_ERROR(CheckModelVersion(r.model_version()));
  if (r.has_key() != r.has_value()) {
    return InvalidArgument(std::string(r.has_key() ? "value" : "key") + ": required with " +
                           (r.has_key() ? "key" : "value") +
                           " (a cross-attention session needs both; neither = self-attention)");
  }
  OpenSessionRequest out;
  out.model = r.model();
  out.model_version = r.model_version();
  out.batch_size = r.batch_size();
  out.max_tokens = r.max_tokens();
  out.session_id = r.session_id();
  // Copies (no borrowing): the projection happens before the call ends, but keep it simple.
  if (r.has_key()) MHA_RETURN_IF_ERROR(Decode(r.key(), "key", TensorSource{}, &out.key));
  if (r.has_value()) MHA_RETURN_IF_ERROR(Decode(r.value(), "value", TensorSource{}, &out.value));
  return out;
}

v1::ModelState ToProtoState(ModelState state) {
  switch (state) {
    case ModelState::kLoading:
      return v1::LOADING;
    case ModelState::kReady:
      return v1::READY;
    case ModelState::kFailed:
      return v1::FAILED;
    case ModelState::kUnloading:
      return v1::UNLOADING;
  }
  return v1::MODEL_STATE_UNSPECIFIED;
}

void FillModelInfo(const ModelEntry& e, bool is_default, v1::ModelInfo* info) {
  info->set_name(e.name);
  info->set_version(e.version);
  info->set_state(ToProtoState(e.state));
  info->set_error(e.error);
  info->set_source(e.source);
  info->set_format(e.format);
  info->set_layout(e.layout);
  info->set_is_default(is_default);
  info->set_architecture(ArchitectureOf(e));
  if (!e.servable) return;  // not loaded
  const MhaOptions& o = e.info.options;
  const StackInfo& stack = e.stack;
  info->set_embed_dim(o.embed_dim);
  info->set_num_heads(o.num_heads);
  info->set_head_dim(stack.head_dim > 0 ? stack.head_dim : o.head_dim());
  info->set_kdim(o.key_dim());
  info->set_vdim(o.value_dim());
  info->set_bias(o.bias);
  info->set_add_bias_kv(o.add_bias_kv);
  info->set_add_zero_attn(o.add_zero_attn);
  info->set_dtype(codec::ToProtoDType(o.dtype));
  info->set_compute_dtype(codec::ToProtoDType(e.info.compute_dtype));
  info->set_device(e.info.device);
  info->set_parameter_count(e.info.parameter_count);
  info->set_num_layers(stack.num_layers);
  info->set_num_key_value_heads(stack.num_key_value_heads);
  info->set_max_positions(stack.max_positions);
  info->set_rope_theta(stack.rope_theta);
  info->set_kv_bytes_per_token_per_layer(stack.kv_bytes_per_token_per_layer);
  info->set_kv_cache_dtype(KvCacheDtypeName(e.kv_cache_dtype));
  info->set_kv_bytes_per_token(e.kv_bytes_per_token);
}

}  // namespace mha::serve
