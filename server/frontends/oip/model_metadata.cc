#include "server/frontends/oip/model_metadata.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "proto/wire/dtype_table.h"
#include "proto/wire/tensor_header.h"
#include "server/frontends/oip/infer_request.h"
#include "server/serving/server_core.h"

namespace mha::serve::oip {
namespace {

struct TensorSpec {
  const char* name;
  int dtype;  // a v1::DataType value
  std::vector<int64_t> shape;
  bool optional;
};

std::vector<TensorSpec> InputSpecs(const MhaOptions& o) {
  const int dtype = codec::ToProtoDType(o.dtype);
  return {
      {kQuery, dtype, {-1, -1, o.embed_dim}, false},  {kKey, dtype, {-1, -1, o.key_dim()}, true},
      {kValue, dtype, {-1, -1, o.value_dim()}, true}, {kKeyPaddingMask, v1::BOOL, {-1, -1}, true},
      {kAttnMask, v1::BOOL, {-1, -1}, true},          {kHeadMask, dtype, {-1}, true}};
}

std::vector<TensorSpec> OutputSpecs(const MhaOptions& o) {
  const int dtype = codec::ToProtoDType(o.dtype);
  return {{kOutput, dtype, {-1, -1, o.embed_dim}, false},
          {kAttnWeights, dtype, {-1, -1, -1}, false},
          {kTopkValues, dtype, {-1, -1, -1}, false},
          {kTopkIndices, v1::INT32, {-1, -1, -1}, false},
          {kHeadEntropy, v1::FLOAT32, {-1, o.num_heads, -1}, false},
          {kHeadMaxWeight, v1::FLOAT32, {-1, o.num_heads, -1}, false}};
}

// Triton's config enum names the protocol's datatypes: TYPE_ + "FP32", ...
inference::DataType ConfigDataType(int dtype) {
  inference::DataType type = inference::TYPE_INVALID;
  const std::string name = codec::OipDatatypeName(dtype);
  if (name.empty() || !inference::DataType_Parse("TYPE_" + name, &type)) {
    return inference::TYPE_INVALID;
  }
  return type;
}

void FillTensorMetadata(const TensorSpec& spec,
                        inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(spec.name);
  out->set_datatype(codec::OipDatatypeName(spec.dtype));
  for (int64_t d : spec.shape) out->add_shape(d);
}

// Instances and, with batching, the dynamic_batching section (delay and queue size).
void FillScheduling(const ModelEntry& entry, const SchedulerView& scheduling,
                    inference::ModelConfig* out) {
  auto* group = out->add_instance_group();
  group->set_name(entry.name);
  const std::string& device = entry.info.device;
  const bool gpu = device.rfind("cuda", 0) == 0;
  group->set_kind(gpu ? inference::ModelInstanceGroup::KIND_GPU
                      : inference::ModelInstanceGroup::KIND_CPU);
  if (gpu) group->add_gpus(device.size() > 5 ? std::atoi(device.c_str() + 5) : 0);
  group->set_count(scheduling.instances);
  if (!scheduling.batching) return;
  auto* dynamic = out->mutable_dynamic_batching();
  dynamic->set_max_queue_delay_microseconds(static_cast<uint64_t>(scheduling.max_queue_delay_us));
  dynamic->mutable_default_queue_policy()->set_max_queue_size(
      static_cast<uint32_t>(scheduling.max_queue_size));
}

// The attention model's own settings, as Triton's string parameters.
void FillParameters(const ModelEntry& entry, inference::ModelConfig* out) {
  const MhaOptions& o = entry.info.options;
  auto& p = *out->mutable_parameters();
  const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  p["embed_dim"].set_string_value(std::to_string(o.embed_dim));
  p["num_heads"].set_string_value(std::to_string(o.num_heads));
  p["head_dim"].set_string_value(std::to_string(o.head_dim()));
  p["kdim"].set_string_value(std::to_string(o.key_dim()));
  p["vdim"].set_string_value(std::to_string(o.value_dim()));
  p["bias"].set_string_value(flag(o.bias));
  p["add_bias_kv"].set_string_value(flag(o.add_bias_kv));
  p["add_zero_attn"].set_string_value(flag(o.add_zero_attn));
  p["dtype"].set_string_value(codec::DataTypeName(codec::ToProtoDType(o.dtype)));
  p["compute_dtype"].set_string_value(
      codec::DataTypeName(codec::ToProtoDType(entry.info.compute_dtype)));
  p["device"].set_string_value(entry.info.device);
  p["format"].set_string_value(entry.format);
  p["layout"].set_string_value(entry.layout);
  p["parameter_count"].set_string_value(std::to_string(entry.info.parameter_count));
  p["kv_cache_dtype"].set_string_value(KvCacheDtypeName(entry.kv_cache_dtype));
  p["kv_bytes_per_token"].set_string_value(std::to_string(entry.kv_bytes_per_token));
  // Triton's reserved request parameters (infer_parameters.cc), so that clients can see them.
  p["request_priority"].set_string_value("accepted and ignored: one priority level");
  p["request_timeout"].set_string_value("microseconds: the request's deadline");
  // Triton's sequence extension (sequence.h). ModelConfig's sequence_batching section is not in
  // our proto (it shares a oneof with dynamic_batching, which steps still go through).
  p["sequence_batching"].set_string_value(
      "sequence_id/sequence_start/sequence_end: a sequence is a decoding session 'seq-<id>'");
}

// Whether the version's inputs and outputs are the one-layer tensors (query, key, value, masks;
// output, weights): a loaded version that is not a multi-layer stack.
bool ListsTensors(const ModelEntry& entry) { return entry.servable && entry.stack.num_layers == 0; }

}  // namespace

void FillModelMetadata(const ModelEntry& entry, inference::ModelMetadataResponse* out) {
  out->set_name(entry.name);
  out->add_versions(entry.version);
  out->set_platform(kPlatform);
  if (!ListsTensors(entry)) return;
  const MhaOptions& o = entry.info.options;
  for (const TensorSpec& spec : InputSpecs(o)) FillTensorMetadata(spec, out->add_inputs());
  for (const TensorSpec& spec : OutputSpecs(o)) FillTensorMetadata(spec, out->add_outputs());
}

void FillModelConfig(const ModelEntry& entry, const std::optional<SchedulerView>& scheduling,
                     inference::ModelConfig* out) {
  out->set_name(entry.name);
  out->set_platform(kPlatform);
  out->set_backend(kBackend);
  out->set_max_batch_size(0);  // B travels in each tensor's shape (see the header)
  out->mutable_model_transaction_policy()->set_decoupled(false);
  if (!ListsTensors(entry)) return;
  const MhaOptions& o = entry.info.options;
  for (const TensorSpec& spec : InputSpecs(o)) {
    auto* input = out->add_input();
    input->set_name(spec.name);
    input->set_data_type(ConfigDataType(spec.dtype));
    for (int64_t d : spec.shape) input->add_dims(d);
    input->set_optional(spec.optional);
  }
  for (const TensorSpec& spec : OutputSpecs(o)) {
    auto* output = out->add_output();
    output->set_name(spec.name);
    output->set_data_type(ConfigDataType(spec.dtype));
    for (int64_t d : spec.shape) output->add_dims(d);
  }
  if (scheduling) FillScheduling(entry, *scheduling, out);
  FillParameters(entry, out);
}

void FillModelIndex(const IndexEntry& entry, inference::RepositoryIndexResponse::ModelIndex* out) {
  out->set_name(entry.name);
  out->set_version(entry.version);
  out->set_reason(entry.reason);
  if (!entry.state) {  // a model folder that is not loaded
    out->set_state("UNAVAILABLE");
    return;
  }
  switch (*entry.state) {
    case ModelState::kReady:
      out->set_state("READY");
      break;
    case ModelState::kLoading:
      out->set_state("LOADING");
      break;
    case ModelState::kUnloading:
      out->set_state("UNLOADING");
      break;
    case ModelState::kFailed:
      out->set_state("UNAVAILABLE");
      break;
  }
}

}  // namespace mha::serve::oip
