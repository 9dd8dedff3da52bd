#include "mha/runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <atomic>

#ifdef MHA_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace mha {
namespace {

using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

SetThreadsFn BlasSetter() {
  static const auto fn =
      reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  return fn;
}

GetThreadsFn BlasGetter() {
  static const auto fn =
      reinterpret_cast<GetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn;
}

}  // namespace

bool SetBlasThreads(int threads) {
  const SetThreadsFn set = BlasSetter();
  if (set == nullptr || threads < 1) return false;
  set(threads);
  return true;
}

int BlasThreads() {
  const GetThreadsFn get = BlasGetter();
  return get != nullptr ? get() : -1;
}

namespace {
std::atomic<DeviceWait> g_device_wait{DeviceWait::kSpin};  // SetDeviceWait
}  // namespace

StatusOr<DeviceWait> ParseDeviceWait(const std::string& name) {
  if (name == "spin") return DeviceWait::kSpin;
  if (name == "block") return DeviceWait::kBlock;
  return InvalidArgument("device wait '" + name + "': spin or block");
}

const char* DeviceWaitName(DeviceWait wait) {
  return wait == DeviceWait::kBlock ? "block" : "spin";
}

void SetDeviceWait(DeviceWait wait) { g_device_wait.store(wait, std::memory_order_relaxed); }
DeviceWait GetDeviceWait() { return g_device_wait.load(std::memory_order_relaxed); }

Status ConfigureThreads(const ThreadingOptions& options) {
  SetDeviceWait(options.device_wait);
  if (options.intra_op_threads > 0) {
    try {
      at::set_num_threads(options.intra_op_threads);
    } catch (const c10::Error& e) {
      return FailedPrecondition("LibTorch could not set " +
                                std::to_string(options.intra_op_threads) +
                                " intra-op thread(s): " + e.what_without_backtrace());
    }
  }
  if (options.inter_op_threads > 0) {
    try {
      at::set_num_interop_threads(options.inter_op_threads);
    } catch (const c10::Error&) {
      // Only settable once, before the inter-op pool starts; keep what is there.
      spdlog::debug("inter-op threads already fixed at {}", at::get_num_interop_threads());
    }
  }
  return Status::Ok();
}

std::string RuntimeSummary() {
  return std::string("LibTorch ") + TORCH_VERSION + ", " +
         (at::hasCUDA() ? "CUDA available" : "no CUDA") + ", " +
         std::to_string(at::get_num_threads()) + " intra-op thread(s), " +
         std::to_string(at::get_num_interop_threads()) + " inter-op thread(s), BLAS " +
         (BlasThreads() > 0 ? std::to_string(BlasThreads()) + " thread(s)" : "threads unknown");
}

std::string TorchVersion() { return TORCH_VERSION; }
bool CudaAvailable() { return at::hasCUDA(); }
int IntraOpThreads() { return at::get_num_threads(); }

namespace {
thread_local int pass_threads = 1;
}  // namespace

int PassThreads() { return pass_threads; }
ScopedPassThreads::ScopedPassThreads(int threads) : previous_(pass_threads) {
  pass_threads = threads < 1 ? 1 : threads;
}
ScopedPassThreads::~ScopedPassThreads() { pass_threads = previous_; }
int InterOpThreads() { return at::get_num_interop_threads(); }

std::vector<DeviceMemory> CudaMemoryStats() {
  std::vector<DeviceMemory> out;
#ifdef MHA_WITH_CUDA
  namespace alloc = c10::cuda::CUDACachingAllocator;
  constexpr size_t aggregate = 0;  // StatType::AGGREGATE (its namespace moved across versions)
  const int devices = static_cast<int>(c10::cuda::device_count());
  for (int d = 0; d < devices; ++d) {
    // Before CUDA is initialised in this process (e.g. every model on the CPU) the allocator has
    // no stats and throws: then there is nothing to report for the device. The stats type is not
    // named: CUDACachingAllocator::DeviceStats in 1.x, an alias of
    // c10::CachingDeviceAllocator::DeviceStats in later 2.x.
    try {
      const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(d));
      out.push_back(DeviceMemory{d, stats.allocated_bytes[aggregate].current,
                                 stats.reserved_bytes[aggregate].current});
    } catch (const c10::Error&) {
      continue;
    }
  }
#endif
  return out;
}

}  // namespace mha
