// Process-wide LibTorch settings. With OpenBLAS (which threads its own GEMMs) ATen's intra-op
// pool is best left at 1: on a 2-core box 2 ATen threads on top cut MHA throughput from ~38 to
// ~15 forward passes/s. Make the choice explicit at start-up instead of inheriting a default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/status.h"

namespace mha {

struct ThreadingOptions {
  int intra_op_threads = 1;  // at::set_num_threads
  int inter_op_threads = 1;  // at::set_num_interop_threads (only before any inter-op work)
};

// FAILED_PRECONDITION when LibTorch cannot size its pools (its cpuinfo needs /proc/cpuinfo; a
// sandbox without /proc makes at::set_num_threads throw), with LibTorch's reason.
Status ConfigureThreads(const ThreadingOptions& options);

// OpenBLAS's own thread pool, which at::set_num_threads does not reach. Found at run time
// (dlsym), so another BLAS (or none) links as well: SetBlasThreads returns false and BlasThreads
// -1 where the BLAS has no such call. OpenBLAS's helper threads spin (sched_yield) for a while
// after every threaded GEMM; a GEMM run at 1 thread wakes none of them.
bool SetBlasThreads(int threads);
int BlasThreads();

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
