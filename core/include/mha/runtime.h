// Process-wide LibTorch settings. With OpenBLAS (which threads its own GEMMs) ATen's intra-op
// pool is best left at 1: on a 2-core box 2 ATen threads on top cut MHA throughput from ~38 to
// ~15 forward passes/s. Make the choice explicit at start-up instead of inheriting a default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/status.h"

namespace mha {

// How a thread waits for its work on a GPU (a pass's copies back to the host, a stream's
// synchronization; mha/device_stream.h). kSpin: CUDA's default, the thread polls: the lowest
// wake-up latency, and a core busy for the whole wait (it counts as the server's CPU). kBlock: the
// thread sleeps on a blocking-sync event until the GPU is done, and small copies to and from the
// host go through pinned buffers so that no copy waits spinning either: the core is free for other
// requests, each wait pays a wake-up. No effect without a GPU.
enum class DeviceWait { kSpin, kBlock };

// "spin" or "block"; INVALID_ARGUMENT naming both otherwise.
StatusOr<DeviceWait> ParseDeviceWait(const std::string& name);
const char* DeviceWaitName(DeviceWait wait);

struct ThreadingOptions {
  int intra_op_threads = 1;  // at::set_num_threads
  int inter_op_threads = 1;  // at::set_num_interop_threads (only before any inter-op work)
  DeviceWait device_wait = DeviceWait::kSpin;  // SetDeviceWait
};

// The process's DeviceWait (ConfigureThreads sets it; kSpin until then).
void SetDeviceWait(DeviceWait wait);
DeviceWait GetDeviceWait();

// FAILED_PRECONDITION when LibTorch cannot size its pools (its cpuinfo needs /proc/cpuinfo; a
// sandbox without /proc makes at::set_num_threads throw), with LibTorch's reason.
Status ConfigureThreads(const ThreadingOptions& options);

// OpenBLAS's own thread pool, which at::set_num_threads does not reach. Found at run time
// (dlsym), so another BLAS (or none) links as well: SetBlasThreads returns false and BlasThreads
// -1 where the BLAS has no such call. OpenBLAS's helper threads spin (sched_yield) for a while
// after every threaded GEMM; a GEMM run at 1 thread wakes none of them.
bool SetBlasThreads(int threads);
int BlasThreads();

// The threads the CPU attention of a pass run on the calling thread may use (the paged kernel
// splits its sessions x K/V heads over them, mha/paged_attention.h): 1 unless set. ATen's intra-op
// pool is not it (kept at 1, above): the serving layer sets this per pass as it sets BLAS's
// threads, so that a pass that is the only work runs its attention on every core as its GEMMs.
int PassThreads();
// Sets PassThreads() on this thread for its lifetime (threads < 1 counts as 1), then puts back
// what was there.
class ScopedPassThreads {
 public:
  explicit ScopedPassThreads(int threads);
  ~ScopedPassThreads();
  ScopedPassThreads(const ScopedPassThreads&) = delete;
  ScopedPassThreads& operator=(const ScopedPassThreads&) = delete;

 private:
  int previous_;
};

// "LibTorch 1.13.0, CPU, 1 intra-op thread(s), OpenMP/OpenBLAS ..." for start-up logs.
std::string RuntimeSummary();

// What the process runs on, for logs, metrics and metadata (no LibTorch needed by the caller).
std::string TorchVersion();  // "1.13.0"
bool CudaAvailable();        // at::hasCUDA(): a CUDA LibTorch that sees a GPU
int IntraOpThreads();        // at::get_num_threads()
int InterOpThreads();        // at::get_num_interop_threads()

// The CUDA caching allocator's current bytes per device that has stats (none on a CPU build,
// without a GPU, or before CUDA is initialised in this process).
struct DeviceMemory {
  int device = 0;
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};
std::vector<DeviceMemory> CudaMemoryStats();

}  // namespace mha
