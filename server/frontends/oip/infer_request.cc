#include "server/frontends/oip/infer_request.h"

#include <algorithm>
#include <array>
#include <utility>

#include "mha/shape_string.h"
#include "mha/text.h"
#include "proto/wire/dtype_table.h"
#include "proto/wire/tensor_codec.h"
#include "server/frontends/common/request_limits.h"

namespace mha::serve::oip {
namespace {

using InputTensor = inference::ModelInferRequest::InferInputTensor;

// Typed contents are read in place: the repeated fields are contiguous arrays of these.
static_assert(sizeof(bool) == 1, "bool_contents are read as one byte per element");
static_assert(sizeof(float) == 4, "fp32_contents are read as 4 bytes per element");

// Where a named input goes; nullptr for a name the model does not take.
HostTensor* InputSlot(const std::string& name, HostInputs* in) {
  if (name == kQuery) return &in->query;
  if (name == kKey) return &in->key;
  if (name == kValue) return &in->value;
  if (name == kKeyPaddingMask) return &in->key_padding_mask;
  if (name == kAttnMask) return &in->attn_mask;
  if (name == kHeadMask) return &in->head_mask;
  return nullptr;
}

bool IsMask(const std::string& name) { return name == kKeyPaddingMask || name == kAttnMask; }

// A typed contents field other than `kept` that holds values, or nullptr.
const char* OtherContents(const inference::InferTensorContents& c, std::string_view kept) {
  const std::array<std::pair<const char*, int>, 8> sizes = {{
      {"bool_contents", c.bool_contents_size()},
      {"int_contents", c.int_contents_size()},
      {"int64_contents", c.int64_contents_size()},
      {"uint_contents", c.uint_contents_size()},
      {"uint64_contents", c.uint64_contents_size()},
      {"fp32_contents", c.fp32_contents_size()},
      {"fp64_contents", c.fp64_contents_size()},
      {"bytes_contents", c.bytes_contents_size()},
  }};
  for (const auto& [name, size] : sizes) {
    if (size > 0 && kept != name) return name;
  }
  return nullptr;
}

// The bytes of an input sent in `contents` (fp32_contents or bool_contents), viewed in place.
StatusOr<std::string_view> TypedBytes(const InputTensor& t, v1::DataType dtype,
                                      const std::vector<int64_t>& shape) {
  const inference::InferTensorContents& c = t.contents();
  const std::string& field = t.name();
  const char* kept = nullptr;
  const char* data = nullptr;
  int64_t count = 0;
  size_t element_size = 0;
  if (dtype == v1::FLOAT32) {
    kept = "fp32_contents";
    data = reinterpret_cast<const char*>(c.fp32_contents().data());
    count = c.fp32_contents_size();
    element_size = sizeof(float);
  } else if (dtype == v1::BOOL) {
    kept = "bool_contents";
    data = reinterpret_cast<const char*>(c.bool_contents().data());
    count = c.bool_contents_size();
    element_size = sizeof(bool);
  } else {
    return InvalidArgument(field + ": datatype " + codec::OipDatatypeName(dtype) +
                           " has no typed contents in the protocol (send it in "
                           "raw_input_contents)");
  }
  if (const char* other = OtherContents(c, kept)) {
    return InvalidArgument(field + ": contents." + other + " does not match datatype " +
                           codec::OipDatatypeName(dtype) + " (use contents." + kept + ")");
  }
  auto needed = codec::ElementCount(shape, field);
  if (!needed.ok()) return needed.status();
  if (count != *needed) {
    return InvalidArgument(field + ": contents." + kept + " has " + std::to_string(count) +
                           " values, shape " + ShapeString(shape) + " needs " +
                           std::to_string(*needed));
  }
  return std::string_view(data, static_cast<size_t>(count) * element_size);
}

// An input's datatype: one the protocol carries, BOOL only for masks (as mha.v1).
StatusOr<v1::DataType> InputDatatype(const InputTensor& t) {
  const std::string& field = t.name();
  auto dtype = ParseDatatype(t.datatype(), field);
  if (!dtype.ok()) return dtype.status();
  if (*dtype == v1::BOOL && !IsMask(field)) {
    return InvalidArgument(field + ": datatype BOOL is not allowed (use FP32, FP16 or BF16)");
  }
  return dtype;
}

// One input: datatype, where its bytes are (`raw`, or its typed contents when null), tensor.
Status DecodeInput(const InputTensor& t, const std::string* raw, bool borrow, HostTensor* out) {
  const std::string& field = t.name();
  auto dtype = InputDatatype(t);
  if (!dtype.ok()) return dtype.status();
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  std::string_view bytes;
  if (raw != nullptr) {
    if (t.has_contents()) {
      return InvalidArgument(field + ": contents must not be set when raw_input_contents is used");
    }
    bytes = *raw;
  } else {
    if (!t.has_contents()) {
      return InvalidArgument(field + ": no data (raw_input_contents is empty and contents unset)");
    }
    auto typed = TypedBytes(t, *dtype, shape);
    if (!typed.ok()) return typed.status();
    bytes = *typed;
  }
  auto decoded = codec::DecodeTensorBytes(*dtype, shape, bytes, field, borrow);
  if (!decoded.ok()) return decoded.status();
  *out = std::move(decoded.value());
  return Status::Ok();
}

// Each input's shared-memory parameters (infer_shm.h), in the order of inputs.
StatusOr<std::vector<std::optional<ShmRef>>> InputShmRefs(const inference::ModelInferRequest& r) {
  std::vector<std::optional<ShmRef>> refs;
  for (const InputTensor& t : r.inputs()) {
    auto ref = ShmParameters(t.parameters(), t.name());
    if (!ref.ok()) return ref.status();
    refs.push_back(std::move(ref.value()));
  }
  return refs;
}

// Inputs come from raw_input_contents (one entry per input not in shared memory, in order), from
// typed contents, or from a shared-memory region.
Status DecodeInputs(const inference::ModelInferRequest& r, const DecodeOptions& options,
                    InferCall* call) {
  HostInputs* in = &call->request.inputs;
  auto refs = InputShmRefs(r);
  if (!refs.ok()) return refs.status();
  int in_band = 0;
  for (const auto& ref : *refs) in_band += ref ? 0 : 1;
  const bool raw = r.raw_input_contents_size() > 0;
  if (raw && r.raw_input_contents_size() != in_band) {
    return InvalidArgument("raw_input_contents has " + std::to_string(r.raw_input_contents_size()) +
                           " entries for " + std::to_string(in_band) +
                           (in_band == r.inputs_size()
                                ? " inputs (one per input, in the order of inputs)"
                                : " inputs not in shared memory (one per input not in "
                                  "shared memory, in the order of inputs)"));
  }
  int raw_index = 0;
  for (int i = 0; i < r.inputs_size(); ++i) {
    const InputTensor& t = r.inputs(i);
    const std::string where = "inputs[" + std::to_string(i) + "]: ";
    HostTensor* slot = InputSlot(t.name(), in);
    if (slot == nullptr) {
      return InvalidArgument(where + "unknown input " + Quoted(t.name()) +
                             " (the model takes query, key, value, key_padding_mask, attn_mask, "
                             "head_mask)");
    }
    if (slot->defined()) return InvalidArgument(where + "input '" + t.name() + "' given twice");
    if (const auto& ref = (*refs)[static_cast<size_t>(i)]) {
      MHA_RETURN_IF_ERROR(InputDatatype(t).status());
      MHA_RETURN_IF_ERROR(DecodeShmInput(t, *ref, options.shm, &call->shm, slot));
      continue;
    }
    const std::string* bytes = raw ? &r.raw_input_contents(raw_index++) : nullptr;
    MHA_RETURN_IF_ERROR(DecodeInput(t, bytes, options.borrow, slot));
  }
  if (!in->query.defined()) return InvalidArgument("query: required");
  return Status::Ok();
}

// A request parameter that must be a bool_param; nullopt when absent.
StatusOr<std::optional<bool>> BoolParameter(const inference::ModelInferRequest& r,
                                            const char* name) {
  const auto it = r.parameters().find(name);
  if (it == r.parameters().end()) return std::optional<bool>();
  if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
    return InvalidArgument(std::string("parameters.") + name + ": must be a bool_param");
  }
  return std::optional<bool>(it->second.bool_param());
}

const HostTensor& OutputOf(const HostOutputs& o, OutputTensor which) {
  switch (which) {
    case OutputTensor::kOutput:
      return o.output;
    case OutputTensor::kAttnWeights:
      return o.attn_weights;
    case OutputTensor::kTopkValues:
      return o.topk_values;
    case OutputTensor::kTopkIndices:
      return o.topk_indices;
    case OutputTensor::kHeadEntropy:
      return o.head_entropy;
    case OutputTensor::kHeadMaxWeight:
      break;
  }
  return o.head_max_weight;
}

}  // namespace

// Inputs are floating or BOOL; INT32/INT64 are for top-k indices, which only go out.
StatusOr<v1::DataType> ParseDatatype(const std::string& datatype, std::string_view field) {
  const codec::DTypeInfo* d = codec::FindOipDType(datatype);
  if (d != nullptr && d->input) return d->wire;
  return InvalidArgument(std::string(field) + ": datatype " + Quoted(datatype) +
                         " is not supported (use FP32, FP16, BF16 or BOOL)");
}

StatusOr<InferCall> DecodeModelInferRequest(const inference::ModelInferRequest& r,
                                            const DecodeOptions& options) {
  MHA_RETURN_IF_ERROR(CheckMessageBytes(r.ByteSizeLong(), options.max_message_bytes));
  InferCall call;
  call.request.model = r.model_name();
  call.id = r.id();
  MHA_RETURN_IF_ERROR(CheckModelVersion(r.model_version()));
  call.request.model_version = r.model_version();
  call.request.protocol = Protocol::kOip;
  MHA_RETURN_IF_ERROR(DecodeControlParameters(r, &call));
  HostInputs& in = call.request.inputs;
  MHA_RETURN_IF_ERROR(DecodeInputs(r, options, &call));
  auto is_causal = BoolParameter(r, kIsCausal);
  if (!is_causal.ok()) return is_causal.status();
  auto need_weights = BoolParameter(r, kNeedWeights);
  if (!need_weights.ok()) return need_weights.status();
  auto average = BoolParameter(r, kAverageAttnWeights);
  if (!average.ok()) return average.status();
  in.is_causal = is_causal->value_or(false);
  in.average_attn_weights = average->value_or(true);  // PyTorch's default
  MHA_RETURN_IF_ERROR(DecodeHeadParameters(r, average->has_value(), &in));
  auto outputs = SelectOutputs(r, *need_weights, &in);
  if (!outputs.ok()) return outputs.status();
  call.outputs = std::move(outputs.value());
  std::vector<std::string> names;
  for (OutputTensor which : call.outputs) names.emplace_back(OutputName(which));
  MHA_RETURN_IF_ERROR(PlaceShmOutputs(r, names, options.shm, &call.shm));
  for (size_t i = 0; i < call.shm.outputs.size(); ++i) {  // CUDA regions: written on the device
    const OutputTensor which = call.outputs[i];
    if (which == OutputTensor::kOutput) PlaceOnDevice(call.shm.outputs[i], &in.output_place);
    if (which == OutputTensor::kAttnWeights) {
      PlaceOnDevice(call.shm.outputs[i], &in.attn_weights_place);
    }
  }
  return StatusOr<InferCall>(std::move(call));
}

Status EncodeModelInferResponse(const InferenceResponse& r,
                                const std::vector<OutputTensor>& outputs, const std::string& id,
                                inference::ModelInferResponse* out, const ShmPlan* shm) {
  if (!r.status.ok()) return r.status;
  if (shm != nullptr) MHA_RETURN_IF_ERROR(CheckShmInputs(*shm));  // read intact by the core
  out->set_model_name(r.model);
  out->set_model_version(r.model_version);
  out->set_id(id);
  (*out->mutable_parameters())["queue_us"].set_int64_param(r.queue_us);
  (*out->mutable_parameters())["compute_us"].set_int64_param(r.compute_us);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputTensor which = outputs[i];
    const HostTensor& tensor = OutputOf(r.outputs, which);
    if (!tensor.defined()) {
      return Internal(std::string(OutputName(which)) +
                      " was requested but the model returned none");
    }
    v1::Tensor wire;  // encoded once by the shared codec (in the core's types), then its bytes move
    const ShmSlice* slot =
        shm != nullptr && i < shm->outputs.size() && shm->outputs[i] ? &*shm->outputs[i] : nullptr;
    MHA_RETURN_IF_ERROR(slot ? codec::EncodeTensorHeader(tensor, &wire)
                             : codec::EncodeTensor(tensor, &wire));
    auto* tensor_out = out->add_outputs();
    tensor_out->set_name(OutputName(which));
    tensor_out->set_datatype(codec::OipDatatypeName(wire.dtype()));
    tensor_out->mutable_shape()->CopyFrom(wire.shape());
    std::string* raw = out->add_raw_output_contents();  // empty for an output in shared memory
    if (slot != nullptr) {
      MHA_RETURN_IF_ERROR(WriteShmOutput(tensor, *slot, OutputName(which), tensor_out));
    } else {
      raw->swap(*wire.mutable_data());
    }
  }
  return Status::Ok();
}

}  // namespace mha::serve::oip
