#include "server/frontends/oip/infer_shm.h"

#include <cstring>
#include <limits>
#include <utility>

#include "mha/shape_string.h"
#include "mha/text.h"
#include "proto/wire/dtype_table.h"
#include "proto/wire/tensor_codec.h"
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

std::string Q(const std::string& text) { return "'" + Abbreviate(text) + "'"; }

}  // namespace

bool IsShmParameter(const std::string& name) {
  return name == kShmRegion || name == kShmByteSize || name == kShmOffset;
}

StatusOr<std::optional<ShmRef>> ShmParameters(const TensorParameters& parameters,
                                              const std::string& field) {
  const Parameter* region = Find(parameters, kShmRegion);
  const Parameter* size = Find(parameters, kShmByteSize);
  const Parameter* offset = Find(parameters, kShmOffset);
  if (region == nullptr) {
    if (size == nullptr && offset == nullptr) return std::optional<ShmRef>();
    return InvalidArgument(field + ": parameters." + (size != nullptr ? kShmByteSize : kShmOffset) +
                           " without shared_memory_region (name the region too)");
  }
  if (region->parameter_choice_case() != Parameter::kStringParam) {
    return InvalidArgument(field + ": parameters.shared_memory_region must be a string_param");
  }
  ShmRef ref;
  ref.region = region->string_param();
  if (size == nullptr) {
    return InvalidArgument(field + ": parameters.shared_memory_region " + Q(ref.region) +
                           " without shared_memory_byte_size (give the tensor's byte size)");
  }
  auto bytes = Unsigned(*size, field, kShmByteSize);
  if (!bytes.ok()) return bytes.status();
  ref.byte_size = *bytes;
  if (offset != nullptr) {
    auto at = Unsigned(*offset, field, kShmOffset);
    if (!at.ok()) return at.status();
    ref.offset = *at;
  }
  return std::optional<ShmRef>(std::move(ref));
}

Status DecodeShmInput(const inference::ModelInferRequest::InferInputTensor& t, const ShmRef& ref,
                      const SharedMemoryRegistry* registry, ShmPlan* plan, HostTensor* out) {
  const std::string& field = t.name();
  if (t.has_contents()) {
    return InvalidArgument(field +
                           ": contents must not be set when the tensor is in shared "
                           "memory region " +
                           Q(ref.region));
  }
  if (registry == nullptr) {
    return InvalidArgument(field + ": shared memory is not available on this endpoint");
  }
  auto dtype = ParseDatatype(t.datatype(), field);
  if (!dtype.ok()) return dtype.status();
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  auto count = codec::ElementCount(shape, field);
  if (!count.ok()) return count.status();
  const codec::DTypeInfo* info = codec::FindDType(*dtype);
  const auto element = static_cast<uint64_t>(info ? info->element_size : 1);
  const auto elements = static_cast<uint64_t>(*count);
  if (elements > std::numeric_limits<uint64_t>::max() / element ||
      elements * element != ref.byte_size) {
    return InvalidArgument(field + ": shared_memory_byte_size " + std::to_string(ref.byte_size) +
                           " (region " + Q(ref.region) + ") is not the tensor's " +
                           std::to_string(elements) + " x " + std::to_string(element) +
                           " bytes (shape " + ShapeString(shape) + " " + t.datatype() + ")");
  }
  auto slice = registry->Acquire(field, ref.region, ref.offset, ref.byte_size);
  if (!slice.ok()) return slice.status();
  auto decoded = codec::DecodeTensorBytes(
      *dtype, shape, std::string_view(slice->data, slice->bytes), field, /*borrow=*/true);
  if (!decoded.ok()) return decoded.status();
  // The tensor keeps the mapping: the region stays mapped while the core reads it.
  auto view =
      HostTensor::View(decoded->dtype(), decoded->shape(), decoded->data(), decoded->bytes(),
                       std::shared_ptr<const void>(slice->mapping), field);
  if (!view.ok()) return view.status();
  *out = std::move(view.value());
  plan->inputs.push_back(std::move(slice.value()));
  return Status::Ok();
}

Status PlaceShmOutputs(const inference::ModelInferRequest& request,
                       const std::vector<std::string>& names, const SharedMemoryRegistry* registry,
                       ShmPlan* plan) {
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& wanted = request.outputs(i);
    auto ref = ShmParameters(wanted.parameters(), wanted.name());
    if (!ref.ok()) return ref.status();
    if (!ref->has_value()) continue;
    if (registry == nullptr) {
      return InvalidArgument(wanted.name() + ": shared memory is not available on this endpoint");
    }
    size_t index = 0;
    while (index < names.size() && names[index] != wanted.name()) ++index;
    if (index == names.size()) continue;  // SelectOutputs refused unknown names already
    auto slice =
        registry->Acquire(wanted.name(), (*ref)->region, (*ref)->offset, (*ref)->byte_size);
    if (!slice.ok()) return slice.status();
    plan->outputs.resize(names.size());
    plan->outputs[index] = std::move(slice.value());
  }
  return Status::Ok();
}

Status CheckShmInputs(const ShmPlan& plan) {
  for (const ShmSlice& slice : plan.inputs) MHA_RETURN_IF_ERROR(slice.Check());
  return Status::Ok();
}

Status WriteShmOutput(const HostTensor& tensor, const ShmSlice& slot, const std::string& name,
                      inference::ModelInferResponse::InferOutputTensor* meta) {
  if (tensor.bytes() > slot.bytes) {
    return InvalidArgument(name + ": shared_memory_byte_size " + std::to_string(slot.bytes) +
                           " (region " + Q(slot.region) + ") is too small for the output's " +
                           std::to_string(tensor.bytes()) + " bytes (shape " +
                           ShapeString(tensor.shape()) + " " +
                           codec::DTypeOf(tensor.dtype()).oip_name + ")");
  }
  MHA_RETURN_IF_ERROR(slot.Check());  // not truncated since the request took it
  if (tensor.bytes() > 0) std::memcpy(slot.data, tensor.data(), tensor.bytes());
  MHA_RETURN_IF_ERROR(slot.Check());  // no page faulted while writing
  auto& params = *meta->mutable_parameters();
  params[kShmRegion].set_string_param(slot.region);
  params[kShmByteSize].set_int64_param(static_cast<int64_t>(tensor.bytes()));
  if (slot.offset != 0) params[kShmOffset].set_int64_param(static_cast<int64_t>(slot.offset));
  return Status::Ok();
}

}  // namespace mha::serve::oip
