#include "server/frontends/shm/shm_tensor.h"

#include <cstring>
#include <limits>
#include <utility>

#include "mha/device_memory.h"
#include "mha/shape_string.h"
#include "mha/text.h"
#include "proto/wire/dtype_table.h"
#include "proto/wire/tensor_codec.h"
#include "proto/wire/tensor_header.h"

namespace mha::serve {
namespace {

// An input in a CUDA region: a device view (the core reads it in place on the device); its start
// aligned to the element size, as LibTorch's kernels need.
Status DeviceInput(const std::string& field, const ShmSlice& slice, int dtype,
                   const std::vector<int64_t>& shape, size_t element, HostTensor* out) {
  if (reinterpret_cast<uintptr_t>(slice.data) % element != 0) {
    return InvalidArgument(field + ": shared_memory_offset " + std::to_string(slice.offset) +
                           " in CUDA region " + Quoted(slice.region) +
                           " is not a multiple of the element size " + std::to_string(element));
  }
  const codec::DTypeInfo* info = codec::FindDType(dtype);
  if (info == nullptr || !info->input) {
    return InvalidArgument(field + ": dtype " + std::to_string(dtype) + " cannot be an input");
  }
  auto view = HostTensor::DeviceView(info->element, shape, slice.data, slice.bytes, slice.device,
                                     std::shared_ptr<const void>(slice.mapping), field);
  if (!view.ok()) return view.status();
  *out = std::move(view.value());
  return Status::Ok();
}

}  // namespace

StatusOr<std::optional<ShmRef>> ResolveShmRef(const ShmFields& f, const std::string& field,
                                              const std::string& where) {
  if (f.region == nullptr) {
    if (!f.byte_size && !f.offset) return std::optional<ShmRef>();
    return InvalidArgument(field + ": " + where +
                           (f.byte_size ? "shared_memory_byte_size" : "shared_memory_offset") +
                           " without shared_memory_region (name the region too)");
  }
  ShmRef ref;
  ref.region = *f.region;
  if (!f.byte_size) {
    return InvalidArgument(field + ": " + where + "shared_memory_region " + Quoted(ref.region) +
                           " without shared_memory_byte_size (give the tensor's byte size)");
  }
  ref.byte_size = *f.byte_size;
  ref.offset = f.offset.value_or(0);
  return std::optional<ShmRef>(std::move(ref));
}

Status ContentsWithRegion(const std::string& field, const std::string& contents,
                          const std::string& region) {
  return InvalidArgument(field + ": " + contents +
                         " must not be set when the tensor is in shared memory region " +
                         Quoted(region));
}

Status NoShmRegistry(const std::string& field) {
  return InvalidArgument(field + ": shared memory is not available on this endpoint");
}

Status AcquireShmInput(const std::string& field, const ShmRef& ref, int dtype,
                       const std::vector<int64_t>& shape, const std::string& dtype_name,
                       const SharedMemoryRegistry* registry, ShmPlan* plan, HostTensor* out) {
  if (registry == nullptr) return NoShmRegistry(field);
  auto count = codec::ElementCount(shape, field);
  if (!count.ok()) return count.status();
  const codec::DTypeInfo* info = codec::FindDType(dtype);
  const auto element = static_cast<uint64_t>(info ? info->element_size : 1);
  const auto elements = static_cast<uint64_t>(*count);
  if (elements > std::numeric_limits<uint64_t>::max() / element ||
      elements * element != ref.byte_size) {
    return InvalidArgument(field + ": shared_memory_byte_size " + std::to_string(ref.byte_size) +
                           " (region " + Quoted(ref.region) + ") is not the tensor's " +
                           std::to_string(elements) + " x " + std::to_string(element) +
                           " bytes (shape " + ShapeString(shape) + " " + dtype_name + ")");
  }
  auto slice = registry->Acquire(field, ref.region, ref.offset, ref.byte_size);
  if (!slice.ok()) return slice.status();
  if (slice->on_device()) {
    MHA_RETURN_IF_ERROR(DeviceInput(field, *slice, dtype, shape, element, out));
    plan->inputs.push_back(std::move(slice.value()));
    return Status::Ok();
  }
  auto decoded = codec::DecodeTensorBytes(dtype, shape, std::string_view(slice->data, slice->bytes),
                                          field, /*borrow=*/true);
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

StatusOr<ShmSlice> AcquireShmOutput(const std::string& field, const ShmRef& ref,
                                    const SharedMemoryRegistry* registry) {
  if (registry == nullptr) return NoShmRegistry(field);
  return registry->Acquire(field, ref.region, ref.offset, ref.byte_size);
}

Status CheckShmInputs(const ShmPlan& plan) {
  for (const ShmSlice& slice : plan.inputs) MHA_RETURN_IF_ERROR(slice.Check());
  return Status::Ok();
}

Status WriteShmTensor(const HostTensor& tensor, const ShmSlice& slot, const std::string& name,
                      const std::string& dtype_name) {
  if (tensor.bytes() > slot.bytes) {
    return InvalidArgument(name + ": shared_memory_byte_size " + std::to_string(slot.bytes) +
                           " (region " + Quoted(slot.region) + ") is too small for the output's " +
                           std::to_string(tensor.bytes()) + " bytes (shape " +
                           ShapeString(tensor.shape()) + " " + dtype_name + ")");
  }
  if (slot.on_device()) {
    // The core wrote it there device to device (PlaceOnDevice), or answered on the host.
    if (tensor.on_device() && tensor.data() == slot.data) return Status::Ok();
    if (tensor.on_device()) return Internal(name + ": answered on a device, not in its region");
    return CopyHostToDevice(slot.data, slot.device, tensor.data(), tensor.bytes());
  }
  MHA_RETURN_IF_ERROR(slot.Check());  // not truncated since the request took it
  if (tensor.bytes() > 0) std::memcpy(slot.data, tensor.data(), tensor.bytes());
  return slot.Check();  // no page faulted while writing
}

void PlaceOnDevice(const std::optional<ShmSlice>& slot, DevicePlace* place) {
  if (!slot || !slot->on_device()) return;
  place->data = slot->data;
  place->bytes = slot->bytes;
  place->device = slot->device;
  place->owner = slot->mapping;
}

}  // namespace mha::serve
