// Streams and pinned staging for forward passes on a CUDA device; no-ops on the CPU.
//
// Streams: every thread that runs forward passes (each worker of a model's
// DynamicBatcher) takes one stream from LibTorch's per-device pool the first time it runs a pass on
// a device and keeps it (a thread_local), so the passes of several instances of one model overlap
// on the GPU instead of queueing on the default stream. MhaModel::ForwardValidated makes that
// stream current for the pass (DeviceStreamScope). For a host query it synchronizes the stream
// before the outputs leave the call, so the caller may read them on any thread and any stream;
// for a query already on the device (a library caller) it returns with the pass queued and the
// caller's stream made to wait for it through an event, as an ATen op on that stream would.
//
// Waiting: every wait here (Synchronize, SynchronizeCurrentStream, CopyToHost) spins or sleeps as
// the process's DeviceWait says (mha/runtime.h); under kBlock every host copy is staged.
//
// Staging: host inputs of kPinnedStagingMinBytes or more are copied into a pinned buffer and sent
// with non_blocking=true (an asynchronous DMA on the pass's stream); smaller ones are copied
// directly. Outputs of a pass whose query came from the host go back the same way (pinned buffer,
// non_blocking copy, then the stream synchronization above).
//
// The public header holds no CUDA types (c10::Stream, c10::OptionalStreamGuard: the device-generic
// forms of CUDAStream / CUDAStreamGuard), so CPU builds and callers need no CUDA headers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace mha {

// Host tensors of at least this many bytes are staged through pinned memory. Below it a copy is
// latency-bound (a few microseconds of DMA against ~10 us of call and synchronization overhead),
// so a pinned buffer's extra host memcpy and the pinned allocator's lock buy nothing; above it a
// pageable copy runs at roughly half the pinned bandwidth and holds the worker thread for the
// whole transfer. 256 KiB: a request of [1, 128, 512] fp32 (256 KiB) and up is staged; gpu-check's
// smallest benchmark shape (query [8, 128, 512]: 2 MiB fp32, 1 MiB fp16) is. To be confirmed on
// the device (bench BM_ForwardHost; scripts/gpu-check.sh step streambench).
inline constexpr int64_t kPinnedStagingMinBytes = int64_t{256} << 10;

// Makes the calling thread's pool stream for `device` (and `device` itself) current until
// destruction, restoring the previous ones then. On the CPU: does nothing. Throws c10::Error where
// LibTorch does (no CUDA in this build, invalid device).
class DeviceStreamScope {
 public:
  explicit DeviceStreamScope(const c10::Device& device);
  DeviceStreamScope(const DeviceStreamScope&) = delete;
  DeviceStreamScope& operator=(const DeviceStreamScope&) = delete;

  // Blocks until the work queued on the stream has finished; no-op on the CPU. May throw.
  void Synchronize() const;

  // For inputs the caller made on the device: the stream waits (on the GPU, through an event) for
  // the work queued so far on the stream that was current when the scope opened.
  void WaitForCaller() const;

  // The caller's stream (current when the scope opened) waits, on the GPU, for the work queued on
  // this stream so far; the host does not block. No-op on the CPU or when the streams are one.
  void CallerWaits() const;

  // For outputs left on the device: the caching allocator keeps `t`'s memory out of reuse until
  // the work the caller queues on its stream by the time `t` is freed has finished.
  void HandToCaller(const at::Tensor& t) const;

  // The stream in use: the same one for every scope a thread opens on one device; nullopt on CPU.
  const std::optional<c10::Stream>& stream() const { return stream_; }

 private:
  // The stream current when the scope opened, when it is another stream than this scope's.
  std::optional<c10::Stream> Caller() const;
  static void Order(const c10::Stream& waiting, const c10::Stream& on);

  std::optional<c10::Stream> stream_;
  c10::OptionalStreamGuard guard_;
};

// `t` on `device`, same dtype, queued on the current stream. Returns `t` itself when it is
// undefined or already there (always on a CPU model). A host tensor going to a CUDA device of at
// least kPinnedStagingMinBytes is copied into a pinned buffer and sent non_blocking; the source may
// be freed on return (the pinned buffer is kept by LibTorch's host allocator until the copy is
// done).
at::Tensor StageToDevice(const at::Tensor& t, const c10::Device& device);

// `t` on the host. Returns `t` itself unless it is a CUDA tensor. At least kPinnedStagingMinBytes:
// a pinned tensor filled by a non_blocking copy on the current stream, valid only after that
// stream is synchronized (DeviceStreamScope::Synchronize); smaller: a blocking copy.
at::Tensor StageToHost(const at::Tensor& t);

// Waits for the work queued so far on `device`'s current stream (e.g. the default stream that
// MhaModel::Create placed the weights on, which pool streams do not wait for). No-op on the CPU.
void SynchronizeCurrentStream(const c10::Device& device);

// `t` on `device`, queued on the current stream without waiting for it: a host tensor going to a
// CUDA device through a pinned buffer, non_blocking, whatever its size (the source may be freed
// on return). Else what t.to(device) gives. For the copies in the middle of a pass or at its start
// on a stream other threads share.
at::Tensor CopyToDeviceQueued(const at::Tensor& t, const c10::Device& device);

// int64 `ids` (block ids, slots, positions) as a tensor on `device`, queued on the current stream
// without waiting for it: on a CUDA device through a pinned buffer, non_blocking (a blocking copy
// from pageable memory synchronizes the stream, so a step's id copy mid-pass would wait for every
// kernel queued before it). On the CPU: at::tensor(ids).
at::Tensor IdsToDevice(const std::vector<int64_t>& ids, const c10::Device& device);

// `t` on the host, complete on return (the current stream waited for, as DeviceWait says); `t`
// itself unless it is a CUDA tensor. What a pass's own `.to(at::kCPU)` would be, without the spin.
at::Tensor CopyToHost(const at::Tensor& t);

}  // namespace mha
