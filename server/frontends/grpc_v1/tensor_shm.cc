#include "server/frontends/grpc_v1/tensor_shm.h"

#include <utility>

#include "proto/wire/tensor_codec.h"
#include "proto/wire/tensor_header.h"

namespace mha::serve {

StatusOr<std::optional<ShmRef>> V1ShmRef(const v1::SharedMemoryRef& ref, const std::string& field) {
  ShmFields fields;
  if (!ref.shared_memory_region().empty()) fields.region = &ref.shared_memory_region();
  if (ref.has_shared_memory_byte_size()) fields.byte_size = ref.shared_memory_byte_size();
  if (ref.has_shared_memory_offset()) fields.offset = ref.shared_memory_offset();
  return ResolveShmRef(fields, field, "shared_memory.");
}

StatusOr<HostTensor> DecodeV1Tensor(const v1::Tensor& tensor, const std::string& field, bool borrow,
                                    const SharedMemoryRegistry* registry, ShmPlan* plan) {
  std::optional<ShmRef> ref;
  if (tensor.has_shared_memory()) {
    auto named = V1ShmRef(tensor.shared_memory(), field);
    if (!named.ok()) return named.status();
    ref = std::move(named.value());
  }
  if (!ref) return codec::DecodeTensor(tensor, field, borrow);
  if (!tensor.data().empty()) return ContentsWithRegion(field, "data", ref->region);
  if (plan == nullptr) return NoShmRegistry(field);
  const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  HostTensor out;
  MHA_RETURN_IF_ERROR(AcquireShmInput(field, *ref, tensor.dtype(), shape,
                                      codec::DataTypeName(tensor.dtype()), registry, plan, &out));
  return out;
}

StatusOr<std::optional<ShmSlice>> PlaceV1Output(const v1::SharedMemoryRef& ref,
                                                const std::string& field,
                                                const SharedMemoryRegistry* registry) {
  auto named = V1ShmRef(ref, field);
  if (!named.ok()) return named.status();
  if (!named->has_value()) return std::optional<ShmSlice>();
  auto slice = AcquireShmOutput(field, **named, registry);
  if (!slice.ok()) return slice.status();
  return std::optional<ShmSlice>(std::move(slice.value()));
}

Status EncodeV1ShmTensor(const HostTensor& tensor, const ShmSlice& slot, const std::string& field,
                         v1::Tensor* out) {
  MHA_RETURN_IF_ERROR(WriteShmTensor(tensor, slot, field,
                                     codec::DataTypeName(codec::ToProtoDType(tensor.dtype()))));
  MHA_RETURN_IF_ERROR(codec::EncodeTensorHeader(tensor, out));
  v1::SharedMemoryRef* place = out->mutable_shared_memory();
  place->set_shared_memory_region(slot.region);
  place->set_shared_memory_byte_size(tensor.bytes());
  if (slot.offset != 0) place->set_shared_memory_offset(slot.offset);
  return Status::Ok();
}

}  // namespace mha::serve
