// CUDA graphs for small forward passes (docs/gpu.md): a small pass on a GPU is launch-bound (the
// fused projection, attention, output projection and a few views cost ~10 kernel launches of
// host time each, far more than their math), so the first pass of each shape bucket is captured
// once into a CUDA graph and later passes of that bucket replay it: one launch.
//
// What is captured: self-attention passes that ask for the output only (no key/value tensors, no
// masks other than is_causal, no weights, no head options) of at most max_tokens query rows.
// Buckets: the batch is padded up to the next power of two (rows of a batch never mix, so padded
// rows change nothing in the real ones; their outputs are dropped), the length T is exact. Each
// key (padded B, T, is_causal) is captured once per model (per version in the server), at most
// max_graphs of them; passes past that bound, or not eligible, run eagerly.
//
// Streams: with LibTorch 2.x one graph serves every stream (each worker thread has its
// own pool stream: mha/device_stream.h), so a warm-up on the loading thread captures what every
// instance replays and the bound is not spent once per stream. Each graph is captured on a stream
// of its own, so the cuBLAS workspace its kernels were captured with (2.x keys workspaces by
// handle and stream) is used by no eager pass; its uses (copy-in, replay on the caller's stream,
// copy-out) are ordered by an event: a use waits, on the GPU, for the previous one on whatever
// stream. Its private memory pool (the pass's intermediates) is thus never used by two replays at
// once. With 1.13 (no thread-local capture, a cuBLAS workspace per handle) the key still carries
// the stream: a graph belongs to the stream it was captured on. A mutex guards the host-side
// enqueue of one graph (cudaGraphExec objects are not thread-safe).
//
// Built with MHA_CUDA_GRAPHS (CMake option MHA_CUDA_GRAPHS, on by default with CUDA); otherwise
// Enabled() is false and the model always runs eagerly.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace mha {

struct CudaGraphOptions {
  bool enabled = true;        // MhaOptions::cuda_graphs; the server's --cuda-graphs
  int64_t max_tokens = 4096;  // padded B × T at most
  int64_t max_graphs = 32;    // captured buckets per model, all streams together
};

class CudaGraphCache {
 public:
  // The eager pass to capture: reads `query` [B, T, E] on the device and returns the output.
  using Pass = std::function<at::Tensor(const at::Tensor& query)>;

  explicit CudaGraphCache(const CudaGraphOptions& options);
  ~CudaGraphCache();
  CudaGraphCache(const CudaGraphCache&) = delete;
  CudaGraphCache& operator=(const CudaGraphCache&) = delete;

  // Whether this build captures graphs at all (MHA_CUDA_GRAPHS) and the options allow it.
  bool Enabled() const;
  // The padded batch of `batch`: the next power of two.
  static int64_t BucketBatch(int64_t batch);

  // The output of `pass` for `query` (on a CUDA device, in the compute dtype, on the current
  // stream) by replaying the bucket's graph, capturing it first if it is new; undefined when the
  // shape is too big or the bound on graphs is reached (the caller then runs eagerly). The
  // returned tensor is the caller's own (not a view of the graph's buffers). May throw c10::Error.
  at::Tensor Run(const at::Tensor& query, bool is_causal, const Pass& pass);

  // Captured graphs (for tests and the log).
  int64_t size() const;
  // Captures tried so far (failed ones included): each bucket's once per version when shared.
  int64_t captures() const;
  // Whether one graph serves every stream (this build: CUDA graphs with LibTorch 2.x).
  static bool SharedAcrossStreams();
  const CudaGraphOptions& options() const { return options_; }

 private:
  struct Graph;
  // padded B, T, is_causal, stream id (0 when SharedAcrossStreams())
  using Key = std::tuple<int64_t, int64_t, bool, int64_t>;
  Graph* FindOrCapture(const Key& key, const at::Tensor& query, const Pass& pass);

  CudaGraphOptions options_;
  mutable std::mutex mu_;
  std::map<Key, std::unique_ptr<Graph>> graphs_;
  int64_t captures_ = 0;
};

}  // namespace mha
