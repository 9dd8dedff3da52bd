#include "mha/cuda_graphs.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#ifdef MHA_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#define MHA_CUDA_GRAPHS_SHARED 1  // one graph per bucket for every stream (cuda_graphs.h)
#endif
#endif

namespace mha {

#ifdef MHA_CUDA_GRAPHS_SHARED
namespace {
// A stream of one graph's own (not the pool's, which other threads share): the cuBLAS workspace
// its capture bakes in is keyed by (handle, stream), so no eager pass ever uses it.
struct OwnedStream {
  cudaStream_t stream = nullptr;
  OwnedStream() { (void)cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
  ~OwnedStream() {
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};
}  // namespace
#endif

struct CudaGraphCache::Graph {
#ifdef MHA_CUDA_GRAPHS_SHARED
  OwnedStream capture;       // declared first: destroyed after the graph and its buffers
  at::cuda::CUDAEvent done;  // recorded after each use; the next use, on any stream, waits for it
  ~Graph() { done.synchronize(); }  // no-op when never recorded
#endif
  std::mutex mu;  // one host thread enqueues copy-in, replay and copy-out at a time
#ifdef MHA_CUDA_GRAPHS
  at::cuda::CUDAGraph graph;
#endif
  at::Tensor input;   // [padded B, T, E]: the captured pass reads it
  at::Tensor output;  // [padded B, T, E]: the captured pass writes it
};

CudaGraphCache::CudaGraphCache(const CudaGraphOptions& options) : options_(options) {}
CudaGraphCache::~CudaGraphCache() = default;

bool CudaGraphCache::Enabled() const {
#ifdef MHA_CUDA_GRAPHS
  return options_.enabled && options_.max_graphs > 0;
#else
  return false;
#endif
}

int64_t CudaGraphCache::BucketBatch(int64_t batch) {
  int64_t padded = 1;
  while (padded < batch) padded *= 2;
  return padded;
}

bool CudaGraphCache::SharedAcrossStreams() {
#ifdef MHA_CUDA_GRAPHS_SHARED
  return true;
#else
  return false;
#endif
}

int64_t CudaGraphCache::captures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return captures_;
}

int64_t CudaGraphCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [key, graph] : graphs_) n += graph != nullptr ? 1 : 0;
  return n;
}

at::Tensor CudaGraphCache::Run(const at::Tensor& query, bool is_causal, const Pass& pass) {
  if (!Enabled() || query.dim() != 3 || !query.is_cuda()) return {};
  const int64_t batch = query.size(0), padded = BucketBatch(batch), len = query.size(1);
  if (padded * len > options_.max_tokens) return {};
#ifdef MHA_CUDA_GRAPHS
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  const Key key{padded, len, is_causal, SharedAcrossStreams() ? 0 : stream.id()};
  Graph* graph = FindOrCapture(key, query, pass);
  if (graph == nullptr) return {};
  std::lock_guard<std::mutex> lock(graph->mu);
#ifdef MHA_CUDA_GRAPHS_SHARED
  graph->done.block(stream);  // the previous use, on whatever stream, is done with the buffers
#endif
  graph->input.narrow(0, 0, batch).copy_(query);
  graph->graph.replay();  // on the current stream
  // A copy queued on the same stream after the replay: the next use may reuse the graph's
  // buffers, the caller's output stays as it is.
  at::Tensor output = graph->output.narrow(0, 0, batch).clone();
#ifdef MHA_CUDA_GRAPHS_SHARED
  graph->done.record(stream);
#endif
  return output;
#else
  (void)is_causal;
  (void)pass;
  return {};
#endif
}

CudaGraphCache::Graph* CudaGraphCache::FindOrCapture(const Key& key, const at::Tensor& query,
                                                     const Pass& pass) {
#ifdef MHA_CUDA_GRAPHS
  // Captures are rare (once per bucket, per stream with 1.13) and short: they run under the cache's
  // lock.
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second.get();  // nullptr: its capture failed, stay eager
  if (static_cast<int64_t>(graphs_.size()) >= options_.max_graphs) return nullptr;
  ++captures_;
  auto graph = std::make_unique<Graph>();
#ifdef MHA_CUDA_GRAPHS_SHARED
  // The capture (and its eager pass before) runs on the graph's own stream.
  const c10::cuda::CUDAStreamGuard on_capture(
      c10::cuda::getStreamFromExternal(graph->capture.stream, query.device().index()));
#endif
  graph->input = at::zeros({std::get<0>(key), query.size(1), query.size(2)}, query.options());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  try {
    // One eager pass first, on this stream: cuBLAS's handle and workspace and the attention
    // kernel's choice are made outside the capture.
    pass(graph->input);
    stream.synchronize();
#if TORCH_VERSION_MAJOR >= 2
    // Thread-local capture: other threads' eager passes (their syncs, pinned allocations) go on.
    graph->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
    graph->graph.capture_begin();  // 1.13: global capture mode only
#endif
    try {
      graph->output = pass(graph->input);
    } catch (...) {
      try {
        graph->graph.capture_end();
      } catch (...) {  // the capture is invalid anyway; its error is the one that matters
      }
      throw;
    }
    graph->graph.capture_end();
  } catch (const std::exception& e) {
    (void)cudaGetLastError();  // capture errors are sticky per thread until read
    spdlog::warn("CUDA graph capture of a pass [{}, {}, E] failed, it runs eagerly: {}",
                 std::get<0>(key), std::get<1>(key), e.what());
    graphs_.emplace(key, nullptr);
    return nullptr;
  }
  spdlog::debug("captured a CUDA graph for passes [{}, {}, E] (causal {}); {} graph(s)",
                std::get<0>(key), std::get<1>(key), std::get<2>(key), graphs_.size() + 1);
  return graphs_.emplace(key, std::move(graph)).first->second.get();
#else
  (void)key;
  (void)query;
  (void)pass;
  return nullptr;
#endif
}

}  // namespace mha
