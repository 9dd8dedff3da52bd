// CUDA IPC regions (mha/device_memory.h). cudart directly rather than LibTorch's
// c10::cuda::CUDACachingAllocator::getIpcDevPtr: that one is an internal API whose signature has
// changed between releases, caches handles by their bytes (two registrations of one handle would
// share one opening, and its close timing is the allocator's), and needs the c10/cuda headers,
// which Debian's LibTorch lacks, so this unit could not even be syntax-checked off the GPU host;
// cudart's IPC calls are stable since CUDA 4 and scripts/cuda-syntax-check.sh compiles this file
// against cuda_runtime_api.h. cudart comes with LibTorch's CUDA build (CUDA::cudart).
#include "mha/device_memory.h"

#include <cstring>
#include <utility>

#if defined(MHA_WITH_CUDA) && defined(MHA_CUDA_SHM)
#include <cuda_runtime_api.h>
#define MHA_DEVICE_MEMORY_CUDA 1
#endif

namespace mha {
namespace {

// The checks that need no device: the handle's size, a region's bytes.
Status CheckIpcArguments(std::string_view handle, uint64_t byte_size, const std::string& what) {
  if (handle.size() != kCudaIpcHandleBytes) {
    return InvalidArgument(what + ": raw_handle is " + std::to_string(handle.size()) +
                           " bytes, a cudaIpcMemHandle_t is " +
                           std::to_string(kCudaIpcHandleBytes));
  }
  if (byte_size == 0) return InvalidArgument(what + ": byte_size must be > 0");
  return Status::Ok();
}

}  // namespace

#ifdef MHA_DEVICE_MEMORY_CUDA
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes, "cudaIpcMemHandle_t is 64 bytes");

std::string CudaError(const char* call, cudaError_t error) {
  return std::string(call) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) +
         ")";
}

// Makes `device` current on this thread until destroyed, restoring the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

class CudaIpcRegion : public DeviceRegion {
 public:
  CudaIpcRegion(void* data, size_t bytes, int device) : DeviceRegion(data, bytes, device) {}
  ~CudaIpcRegion() override {
    DeviceScope scope(device());
    cudaIpcCloseMemHandle(data());
  }
};

}  // namespace

bool CudaShmBuilt() { return true; }
std::string CudaShmUnavailableReason() { return ""; }

StatusOr<std::shared_ptr<const DeviceRegion>> OpenCudaIpcRegion(std::string_view handle, int device,
                                                                uint64_t byte_size,
                                                                const std::string& what) {
  MHA_RETURN_IF_ERROR(CheckIpcArguments(handle, byte_size, what));
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return FailedPrecondition(what + ": no CUDA device: " + CudaError("cudaGetDeviceCount", e));
  }
  if (device < 0 || device >= count) {
    return InvalidArgument(what + ": device_id " + std::to_string(device) + " is not in [0, " +
                           std::to_string(count) + ") (this server sees " + std::to_string(count) +
                           " CUDA devices)");
  }
  cudaIpcMemHandle_t raw;
  std::memcpy(&raw, handle.data(), sizeof(raw));
  DeviceScope scope(device);
  void* data = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&data, raw, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls on this thread are clean
    return InvalidArgument(what + ": cannot open the handle on device " + std::to_string(device) +
                           " (" + CudaError("cudaIpcOpenMemHandle", e) +
                           "; a handle opens only in another process than the one that made it)");
  }
  return std::shared_ptr<const DeviceRegion>(
      std::make_shared<CudaIpcRegion>(data, static_cast<size_t>(byte_size), device));
}

Status CopyHostToDevice(void* dst, int device, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  DeviceScope scope(device);
  if (const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    cudaGetLastError();
    return Internal("writing " + std::to_string(bytes) + " bytes to device " +
                    std::to_string(device) + ": " + CudaError("cudaMemcpy", e));
  }
  return Status::Ok();
}

#else  // no CUDA shared memory in this build

bool CudaShmBuilt() { return false; }

std::string CudaShmUnavailableReason() {
#ifdef MHA_WITH_CUDA
  return "this server was built with -DMHA_CUDA_SHM=OFF";
#else
  return "this server was built without CUDA";
#endif
}

StatusOr<std::shared_ptr<const DeviceRegion>> OpenCudaIpcRegion(std::string_view handle, int device,
                                                                uint64_t byte_size,
                                                                const std::string& what) {
  MHA_RETURN_IF_ERROR(CheckIpcArguments(handle, byte_size, what));
  return FailedPrecondition(what + ": CUDA shared memory: " + CudaShmUnavailableReason() +
                            " (use system shared memory)");
}

Status CopyHostToDevice(void* dst, int device, const void* src, size_t bytes) {
  return FailedPrecondition("CUDA shared memory: " + CudaShmUnavailableReason());
}

#endif

}  // namespace mha
