// Triton's shared-memory extensions on gRPC: SystemSharedMemoryStatus / Register / Unregister and
// CudaSharedMemoryStatus / Register / Unregister on the shared registry
// (shm/shared_memory_registry.h; CUDA regions open a cudaIpcMemHandle_t, mha/device_memory.h,
// and a build without CUDA shared memory refuses them: cuda_shared_memory is then not in
// ServerMetadata). All six need the admin token when one is set, as the repository calls;
// registration also needs --allow-client-shm=true.
// Unregister answers once the region is unmapped: at once, or when the last request using it
// has been answered.
#include <string>
#include <utility>

#include "mha/device_memory.h"
#include "mha/text.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/oip/inference_service.h"

namespace mha::serve::oip {
namespace {

Status NoRegistry() {
  return FailedPrecondition("shared memory is not available on this endpoint");
}

std::string Detail(const std::string& name) {
  return "region=" + (name.empty() ? std::string("(all)") : Abbreviate(name));
}

}  // namespace

void GrpcInferenceServiceImpl::HandleSystemSharedMemoryStatus(
    const UnaryCall& call, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  return AdminUnary(call, "SystemSharedMemoryStatus", options_.admin_token, [&] {
    if (options_.shm == nullptr) return NoRegistry();
    auto regions = options_.shm->Regions(request->name());
    if (!regions.ok()) return regions.status();
    for (const ShmRegionSpec& r : *regions) {
      auto& out = (*response->mutable_regions())[r.name];
      out.set_name(r.name);
      out.set_key(r.key);
      out.set_offset(r.offset);
      out.set_byte_size(r.byte_size);
    }
    return Status::Ok();
  });
}

void GrpcInferenceServiceImpl::HandleSystemSharedMemoryRegister(
    const UnaryCall& call, const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse* response) {
  return AdminUnary(call, "SystemSharedMemoryRegister", options_.admin_token, [&] {
    if (options_.shm == nullptr) return UnaryAnswer{NoRegistry(), ""};
    const ShmRegionSpec spec{request->name(), request->key(), request->offset(),
                             request->byte_size()};
    return UnaryAnswer{options_.shm->Register(spec), Detail(request->name())};
  });
}

void GrpcInferenceServiceImpl::HandleSystemSharedMemoryUnregister(
    const UnaryCall& call, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse* response) {
  return AdminUnary(call, "SystemSharedMemoryUnregister", options_.admin_token,
                    [&](const UnaryFinish& finish) {
                      if (options_.shm == nullptr) return finish(NoRegistry());
                      const std::string detail = Detail(request->name());
                      options_.shm->Unregister(request->name(), [finish, detail] {
                        finish(Status::Ok(), detail);  // the region is unmapped
                      });
                    });
}

void GrpcInferenceServiceImpl::HandleCudaSharedMemoryStatus(
    const UnaryCall& call, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  return AdminUnary(call, "CudaSharedMemoryStatus", options_.admin_token, [&] {
    if (options_.shm == nullptr) return NoRegistry();
    auto regions = options_.shm->CudaRegions(request->name());
    if (!regions.ok()) return regions.status();
    for (const CudaShmRegionSpec& r : *regions) {
      auto& out = (*response->mutable_regions())[r.name];
      out.set_name(r.name);
      out.set_device_id(static_cast<uint64_t>(r.device_id));
      out.set_byte_size(r.byte_size);
    }
    return Status::Ok();
  });
}

void GrpcInferenceServiceImpl::HandleCudaSharedMemoryRegister(
    const UnaryCall& call, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse* response) {
  return AdminUnary(call, "CudaSharedMemoryRegister", options_.admin_token, [&] {
    if (options_.shm == nullptr) return UnaryAnswer{NoRegistry(), ""};
    const CudaShmRegionSpec spec{request->name(), request->raw_handle(),
                                 static_cast<int64_t>(request->device_id()), request->byte_size()};
    return UnaryAnswer{options_.shm->RegisterCuda(spec), Detail(request->name())};
  });
}

void GrpcInferenceServiceImpl::HandleCudaSharedMemoryUnregister(
    const UnaryCall& call, const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse* response) {
  return AdminUnary(call, "CudaSharedMemoryUnregister", options_.admin_token,
                    [&](const UnaryFinish& finish) {
                      if (options_.shm == nullptr) return finish(NoRegistry());
                      const std::string detail = Detail(request->name());
                      options_.shm->Unregister(
                          request->name(),
                          [finish, detail] {
                            finish(Status::Ok(), detail);  // the region is closed
                          },
                          ShmKind::kCuda);
                    });
}

}  // namespace mha::serve::oip
