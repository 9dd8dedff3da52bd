#include "mha/cuda_graphs.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#ifdef MHA_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>
#endif

namespace mha {

struct CudaGraphCache::Graph {
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
  const Key key{padded, len, is_causal, c10::cuda::getCurrentCUDAStream().id()};
  Graph* graph = FindOrCapture(key, query, pass);
  if (graph == nullptr) return {};
  std::lock_guard<std::mutex> lock(graph->mu);
  graph->input.narrow(0, 0, batch).copy_(query);
  graph->graph.replay();
  // A copy queued on the same stream after the replay: the next pass on this stream may reuse
  // the graph's buffers, the caller's output stays as it is.
  return graph->output.narrow(0, 0, batch).clone();
#else
  (void)is_causal;
  (void)pass;
  return {};
#endif
}

CudaGraphCache::Graph* CudaGraphCache::FindOrCapture(const Key& key, const at::Tensor& query,
                                                     const Pass& pass) {
#ifdef MHA_CUDA_GRAPHS
  // Captures are rare (once per bucket and stream) and short: they run under the cache's lock.
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second.get();  // nullptr: its capture failed, stay eager
  if (static_cast<int64_t>(graphs_.size()) >= options_.max_graphs) return nullptr;
  auto graph = std::make_unique<Graph>();
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
