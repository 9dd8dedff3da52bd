// CUDA device memory that another process shares with the server (Triton's cuda_shared_memory
// extension), torch-free: front ends carry the region's device pointer and bytes, never a CUDA or
// LibTorch type. A client exports a cudaIpcMemHandle_t (64 bytes) of its allocation; the server
// opens it here (cudaIpcOpenMemHandle) and closes it (cudaIpcCloseMemHandle) when the last holder
// of the region lets go (the registry until unregistered, every request that uses it until
// answered). The core reads inputs from it in place (mha/tensor_adapter.h: HostTensor::on_device)
// and writes outputs into it device to device (HostInputs / OutputTypes: DevicePlace).
//
// Built with CUDA (MHA_WITH_CUDA) and the unit's option MHA_CUDA_SHM (default ON; core/
// CMakeLists.txt): cudart is called directly. Otherwise every call answers FAILED_PRECONDITION
// naming why (built without CUDA, or with -DMHA_CUDA_SHM=OFF).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mha/status.h"

namespace mha {

inline constexpr size_t kCudaIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

// An opened CUDA IPC region: `bytes` bytes at `data` on CUDA device `device`. Closed when
// destroyed.
class DeviceRegion {
 public:
  virtual ~DeviceRegion() = default;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 protected:
  DeviceRegion(void* data, size_t bytes, int device)
      : data_(data), bytes_(bytes), device_(device) {}

 private:
  void* const data_;
  const size_t bytes_;
  const int device_;
};

// True when this build can open CUDA IPC handles (MHA_WITH_CUDA and MHA_CUDA_SHM).
bool CudaShmBuilt();
// Why it cannot ("" when it can): "this server was built without CUDA", ...
std::string CudaShmUnavailableReason();

// Opens `handle` (the 64 bytes of a cudaIpcMemHandle_t) on CUDA device `device` for `byte_size`
// bytes. FAILED_PRECONDITION when CudaShmBuilt() is false; INVALID_ARGUMENT naming the numbers for
// a handle that is not 64 bytes, a device not in [0, cudaGetDeviceCount()), byte_size 0, or a
// handle cudart refuses (its error named). `what` prefixes messages ("region 'in'").
StatusOr<std::shared_ptr<const DeviceRegion>> OpenCudaIpcRegion(std::string_view handle, int device,
                                                                uint64_t byte_size,
                                                                const std::string& what);

// Copies `bytes` host bytes to `dst` on CUDA device `device` and waits for the copy (an answer the
// core left on the host, written into a CUDA region). FAILED_PRECONDITION without CUDA.
Status CopyHostToDevice(void* dst, int device, const void* src, size_t bytes);

}  // namespace mha
