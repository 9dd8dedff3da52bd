#include "oip_translate.h"

#include <string>

#include "proto/wire/dtype_table.h"

namespace mha::client {
namespace {

// The datatypes this translation carries (proto/wire/dtype_table.h): those an input may have.
const codec::DTypeInfo* ByDtype(v1::DataType dtype) {
  const codec::DTypeInfo* d = codec::FindDType(dtype);
  return d != nullptr && d->input ? d : nullptr;
}

const codec::DTypeInfo* ByName(const std::string& name) {
  const codec::DTypeInfo* d = codec::FindOipDType(name);
  return d != nullptr && d->input ? d : nullptr;
}

Status AddInput(const char* name, const v1::Tensor& tensor, inference::ModelInferRequest* out) {
  const codec::DTypeInfo* datatype = ByDtype(tensor.dtype());
  if (datatype == nullptr) {
    return InvalidArgument(std::string(name) + ": dtype " + v1::DataType_Name(tensor.dtype()) +
                           " has no Open Inference Protocol datatype here");
  }
  auto* input = out->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype->oip_name);
  for (int64_t d : tensor.shape()) input->add_shape(d);
  *out->add_raw_input_contents() = tensor.data();
  return Status::Ok();
}

void SetBool(const char* name, bool value, inference::ModelInferRequest* out) {
  (*out->mutable_parameters())[name].set_bool_param(value);
}

int64_t Int64Parameter(const inference::ModelInferResponse& r, const char* name) {
  auto it = r.parameters().find(name);
  return it == r.parameters().end() ? 0 : it->second.int64_param();
}

}  // namespace

StatusOr<inference::ModelInferRequest> ToModelInferRequest(const v1::ForwardRequest& r) {
  if (r.output_dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    return InvalidArgument(
        "output_dtype: the Open Inference Protocol answers in the model's dtype");
  }
  if (r.weights_heads_size() > 0 || r.has_weights_query_begin() || r.has_weights_query_end() ||
      r.weights_top_k() != 0 || r.weights_dtype() != v1::DATA_TYPE_UNSPECIFIED ||
      r.weights_topk_indices_dtype() != v1::DATA_TYPE_UNSPECIFIED || r.head_stats() ||
      r.has_head_mask()) {
    // The server takes them as ModelInfer parameters (docs/heads.md); this client does not
    // translate them yet, and dropping them silently would answer another question.
    return InvalidArgument(
        "the head options (weights_*, head_stats, head_mask) are not sent with --protocol oip by "
        "this client yet; use --protocol mha.v1");
  }
  if (!r.session_id().empty()) {
    return InvalidArgument(
        "session_id: decoding sessions are an mha.v1 feature (the Open Inference Protocol has "
        "no session RPCs); use --protocol mha.v1");
  }
  inference::ModelInferRequest out;
  out.set_model_name(r.model());
  out.set_model_version(r.model_version());
  const std::pair<const char*, const v1::Tensor*> inputs[] = {
      {"query", r.has_query() ? &r.query() : nullptr},
      {"key", r.has_key() ? &r.key() : nullptr},
      {"value", r.has_value() ? &r.value() : nullptr},
      {"key_padding_mask", r.has_key_padding_mask() ? &r.key_padding_mask() : nullptr},
      {"attn_mask", r.has_attn_mask() ? &r.attn_mask() : nullptr}};
  for (const auto& [name, tensor] : inputs) {
    if (tensor != nullptr) MHA_RETURN_IF_ERROR(AddInput(name, *tensor, &out));
  }
  SetBool("is_causal", r.is_causal(), &out);
  SetBool("need_weights", r.need_weights(), &out);
  if (r.has_average_attn_weights()) {
    SetBool("average_attn_weights", r.average_attn_weights(), &out);
  }
  return out;
}

StatusOr<v1::ForwardResponse> FromModelInferResponse(const inference::ModelInferResponse& r) {
  v1::ForwardResponse out;
  out.set_model(r.model_name());
  out.set_model_version(r.model_version());
  out.set_queue_us(Int64Parameter(r, "queue_us"));
  out.set_compute_us(Int64Parameter(r, "compute_us"));
  for (int i = 0; i < r.outputs_size(); ++i) {
    const auto& output = r.outputs(i);
    v1::Tensor* tensor = nullptr;
    if (output.name() == "output") tensor = out.mutable_output();
    if (output.name() == "attn_weights") tensor = out.mutable_attn_weights();
    if (tensor == nullptr) continue;
    const codec::DTypeInfo* datatype = ByName(output.datatype());
    if (datatype == nullptr || i >= r.raw_output_contents_size()) {
      return InvalidArgument("outputs[" + std::to_string(i) + "] (" + output.name() +
                             "): datatype '" + output.datatype() +
                             "' unknown or no raw_output_contents");
    }
    int64_t numel = 1;
    for (int64_t d : output.shape()) numel *= d;
    const std::string& raw = r.raw_output_contents(i);
    if (static_cast<int64_t>(raw.size()) != numel * static_cast<int64_t>(datatype->element_size)) {
      return InvalidArgument("outputs[" + std::to_string(i) + "] (" + output.name() +
                             "): " + std::to_string(raw.size()) + " bytes for " +
                             std::to_string(numel) + " elements of " + datatype->oip_name);
    }
    tensor->set_dtype(datatype->wire);
    for (int64_t d : output.shape()) tensor->add_shape(d);
    tensor->set_data(raw);
  }
  return out;
}

}  // namespace mha::client
