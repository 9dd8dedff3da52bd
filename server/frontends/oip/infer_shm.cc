#include "server/frontends/oip/infer_shm.h"

#include <utility>

#include "proto/wire/dtype_table.h"
#include "server/frontends/oip/infer_request.h"

namespace mha::serve::oip {
namespace {

using Parameter = inference::InferParameter;

const Parameter* Find(const TensorParameters& p, const char* name) {
  const auto it = p.find(name);
  return it == p.end() ? nullptr : &it->second;
}

StatusOr<uint64_t> Unsigned(const Parameter& p, const std::string& field, const char* name) {
  if (p.parameter_choice_case() == Parameter::kUint64Param) return p.uint64_param();
  if (p.parameter_choice_case() == Parameter::kInt64Param && p.int64_param() >= 0) {
    return static_cast<uint64_t>(p.int64_param());
  }
  return InvalidArgument(field + ": parameters." + name +
                         " must be a non-negative int64_param or uint64_param");
}

}  // namespace

bool IsShmParameter(const std::string& name) {
  return name == kShmRegion || name == kShmByteSize || name == kShmOffset;
}

// The parameters' kinds are checked here; the rules are shm/shm_tensor.h's.
StatusOr<std::optional<ShmRef>> ShmParameters(const TensorParameters& parameters,
                                              const std::string& field) {
  const Parameter* region = Find(parameters, kShmRegion);
  const Parameter* size = Find(parameters, kShmByteSize);
  const Parameter* offset = Find(parameters, kShmOffset);
  ShmFields fields;
  if (region != nullptr) {
    if (region->parameter_choice_case() != Parameter::kStringParam) {
      return InvalidArgument(field + ": parameters.shared_memory_region must be a string_param");
    }
    fields.region = &region->string_param();
    if (size != nullptr) {
      auto bytes = Unsigned(*size, field, kShmByteSize);
      if (!bytes.ok()) return bytes.status();
      fields.byte_size = *bytes;
    }
    if (size != nullptr && offset != nullptr) {
      auto at = Unsigned(*offset, field, kShmOffset);
      if (!at.ok()) return at.status();
      fields.offset = *at;
    }
  } else {
    if (size != nullptr) fields.byte_size = 0;  // only their presence matters without a region
    if (offset != nullptr) fields.offset = 0;
  }
  return ResolveShmRef(fields, field, "parameters.");
}

Status DecodeShmInput(const inference::ModelInferRequest::InferInputTensor& t, const ShmRef& ref,
                      const SharedMemoryRegistry* registry, ShmPlan* plan, HostTensor* out) {
  if (t.has_contents()) return ContentsWithRegion(t.name(), "contents", ref.region);
  if (registry == nullptr) return NoShmRegistry(t.name());
  auto dtype = ParseDatatype(t.datatype(), t.name());
  if (!dtype.ok()) return dtype.status();
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  return AcquireShmInput(t.name(), ref, *dtype, shape, t.datatype(), registry, plan, out);
}

Status PlaceShmOutputs(const inference::ModelInferRequest& request,
                       const std::vector<std::string>& names, const SharedMemoryRegistry* registry,
                       ShmPlan* plan) {
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& wanted = request.outputs(i);
    auto ref = ShmParameters(wanted.parameters(), wanted.name());
    if (!ref.ok()) return ref.status();
    if (!ref->has_value()) continue;
    if (registry == nullptr) return NoShmRegistry(wanted.name());
    size_t index = 0;
    while (index < names.size() && names[index] != wanted.name()) ++index;
    if (index == names.size()) continue;  // SelectOutputs refused unknown names already
    auto slice = AcquireShmOutput(wanted.name(), **ref, registry);
    if (!slice.ok()) return slice.status();
    plan->outputs.resize(names.size());
    plan->outputs[index] = std::move(slice.value());
  }
  return Status::Ok();
}

Status WriteShmOutput(const HostTensor& tensor, const ShmSlice& slot, const std::string& name,
                      inference::ModelInferResponse::InferOutputTensor* meta) {
  MHA_RETURN_IF_ERROR(WriteShmTensor(tensor, slot, name, codec::DTypeOf(tensor.dtype()).oip_name));
  auto& params = *meta->mutable_parameters();
  params[kShmRegion].set_string_param(slot.region);
  params[kShmByteSize].set_int64_param(static_cast<int64_t>(tensor.bytes()));
  if (slot.offset != 0) params[kShmOffset].set_int64_param(static_cast<int64_t>(slot.offset));
  return Status::Ok();
}

}  // namespace mha::serve::oip
