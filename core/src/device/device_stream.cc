#include "mha/device_stream.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include "mha/runtime.h"

#ifdef MHA_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <unordered_map>
#endif

namespace mha {
namespace {

int64_t Bytes(const at::Tensor& t) {
  return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
}

// An uninitialised contiguous host tensor like `t`, in page-locked memory from LibTorch's caching
// host allocator (which keeps a buffer out of reuse until the copies recorded on it are done).
at::Tensor PinnedLike(const at::Tensor& t) {
  return at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()).pinned_memory(true));
}

#ifdef MHA_WITH_CUDA
// The calling thread's stream on a CUDA device: taken from the pool (round-robin over 32 streams
// per device, created non-blocking, i.e. not synchronizing with the legacy default stream) on the
// thread's first pass there, then kept. Threads beyond 32 share streams: still correct, since each
// pass synchronizes its stream, only with less overlap.
c10::Stream ThreadStream(const c10::Device& device) {
  thread_local std::unordered_map<c10::DeviceIndex, c10::Stream> streams;
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  auto it = streams.find(index);
  if (it == streams.end()) {
    const c10::Stream stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    it = streams.emplace(index, stream).first;
  }
  return it->second;
}

// Blocks until the work queued so far on `stream` is done, as the process's DeviceWait says:
// kSpin polls (CUDAStream::synchronize); kBlock records a blocking-sync event (one per thread and
// device, reused) and sleeps in cudaEventSynchronize until the GPU reaches it.
void WaitFor(const c10::cuda::CUDAStream& stream) {
  if (GetDeviceWait() == DeviceWait::kSpin) {
    stream.synchronize();
    return;
  }
  thread_local std::unordered_map<c10::DeviceIndex, std::unique_ptr<at::cuda::CUDAEvent>> events;
  auto& event = events[stream.device_index()];
  if (!event) {
    event = std::make_unique<at::cuda::CUDAEvent>(cudaEventDisableTiming | cudaEventBlockingSync);
  }
  event->record(stream);
  event->synchronize();
}
#endif

// Under DeviceWait::kBlock a copy between the host and a device never waits spinning, whatever
// its size: it goes through a pinned buffer, non_blocking.
bool PinAlways() { return GetDeviceWait() == DeviceWait::kBlock; }

}  // namespace

DeviceStreamScope::DeviceStreamScope(const c10::Device& device) {
  if (!device.is_cuda()) return;
#ifdef MHA_WITH_CUDA
  stream_ = ThreadStream(device);
  guard_.reset_stream(*stream_);  // what c10::cuda::CUDAStreamGuard does: device + stream
#else
  TORCH_CHECK(false, "device ", device.str(), " needs a LibTorch with CUDA; this build has none");
#endif
}

void DeviceStreamScope::Synchronize() const {
#ifdef MHA_WITH_CUDA
  if (stream_) WaitFor(c10::cuda::CUDAStream(*stream_));
#endif
}

std::optional<c10::Stream> DeviceStreamScope::Caller() const {
  const auto caller = guard_.original_stream();
  if (!stream_ || !caller || *caller == *stream_) return std::nullopt;
  return *caller;
}

// `waiting` orders after the work queued on `on` so far, on the GPU (an event; the host goes on).
void DeviceStreamScope::Order(const c10::Stream& waiting, const c10::Stream& on) {
  c10::Event event(on.device_type());
  event.record(on);
  event.block(waiting);
}

void DeviceStreamScope::WaitForCaller() const {
  if (const auto caller = Caller()) Order(*stream_, *caller);
}

void DeviceStreamScope::CallerWaits() const {
  if (const auto caller = Caller()) Order(*caller, *stream_);
}

void DeviceStreamScope::HandToCaller(const at::Tensor& t) const {
  const auto caller = Caller();
  if (!caller || !t.defined() || !t.is_cuda()) return;
  t.record_stream(*caller);
}

at::Tensor StageToDevice(const at::Tensor& t, const c10::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  if (!device.is_cuda() || !t.is_cpu() || (Bytes(t) < kPinnedStagingMinBytes && !PinAlways())) {
    return t.to(device);  // blocking: the source may be borrowed bytes that go away after return
  }
  return CopyToDeviceQueued(t, device);
}

at::Tensor CopyToDeviceQueued(const at::Tensor& t, const c10::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  if (!device.is_cuda() || !t.is_cpu()) return t.to(device);
  if (t.is_pinned()) return t.to(device, t.scalar_type(), /*non_blocking=*/true);
  at::Tensor pinned = PinnedLike(t);
  pinned.copy_(t);
  return pinned.to(device, pinned.scalar_type(), /*non_blocking=*/true);
}

at::Tensor StageToHost(const at::Tensor& t) {
  if (!t.defined() || !t.is_cuda()) return t;
  if (Bytes(t) < kPinnedStagingMinBytes && !PinAlways()) {
    return t.to(at::kCPU);  // blocking: syncs the stream
  }
  at::Tensor pinned = PinnedLike(t);
  pinned.copy_(t, /*non_blocking=*/true);
  return pinned;
}

void SynchronizeCurrentStream(const c10::Device& device) {
  if (!device.is_cuda()) return;
#ifdef MHA_WITH_CUDA
  WaitFor(c10::cuda::getCurrentCUDAStream(device.has_index() ? device.index() : -1));
#endif
}

at::Tensor IdsToDevice(const std::vector<int64_t>& ids, const c10::Device& device) {
  return CopyToDeviceQueued(at::tensor(ids, at::kLong), device);
}

at::Tensor CopyToHost(const at::Tensor& t) {
  if (!t.defined() || !t.is_cuda()) return t;
  if (!PinAlways()) return t.to(at::kCPU);  // blocking: syncs the stream (spinning)
  at::Tensor pinned = StageToHost(t);
  SynchronizeCurrentStream(t.device());
  return pinned;
}

}  // namespace mha
