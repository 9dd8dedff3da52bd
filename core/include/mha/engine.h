// The core as the serving layer, the front ends and the app see it: models, passes and session
// caches behind opaque handles, requests and answers as host tensors (mha/host_io.h). No LibTorch
// in this header; the core implements it with the tensor adapter (mha/tensor_adapter.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mha/head_analysis.h"
#include "mha/host_io.h"
#include "mha/load_options.h"
#include "mha/options.h"
#include "mha/status.h"

namespace mha {

class MhaModel;     // mha/model.h
class KvBlockPool;  // mha/kv_cache.h
class KvCache;

// What callers outside the core read about a loaded model.
struct ModelInfo {
  MhaOptions options;                     // embed_dim, heads, kdim/vdim, dtype...
  std::string device;                     // resolved: "cpu", "cuda:0"
  DType compute_dtype = DType::kFloat32;  // options.dtype, or float32 where the device lacks it
  int64_t parameter_count = 0;
  // CUDA graphs (mha/cuda_graphs.h): padded-batch buckets of at most cuda_graph_max_tokens tokens,
  // at most cuda_graph_max_graphs per model; both 0 where no pass replays a graph (CPU, graphs
  // off, a build without them). Shared: one graph per bucket serves every stream (LibTorch 2.x).
  int64_t cuda_graph_max_tokens = 0;
  int64_t cuda_graph_max_graphs = 0;
  bool cuda_graphs_shared = false;
};
ModelInfo DescribeModel(const MhaModel& model);

struct LoadedModel {
  std::shared_ptr<const MhaModel> model;
  ModelInfo info;
  std::string format;  // "safetensors", "torch_save", "torchscript", "builtin"
  std::string layout;  // "packed", "separate_proj", ...
  std::vector<std::string> unused_keys;
};
// LoadWeights (mha/loader.h) and MhaModel::Create; errors name the file, key and shapes.
StatusOr<LoadedModel> LoadModel(const LoadOptions& options);
// The model served without a repository: E=512, H=8, bias, weights from a fixed seed
// (splitmix64 -> uniform(-1/sqrt(E), 1/sqrt(E))), identical on every run and machine.
inline constexpr int64_t kDefaultEmbedDim = 512;
inline constexpr int64_t kDefaultNumHeads = 8;
StatusOr<LoadedModel> BuildDefaultModel(const MhaOptions& options);  // embed_dim, num_heads set

// MhaModel::ValidateInputs on host inputs (no copy): INVALID_ARGUMENT naming the field.
Status ValidateInputs(const MhaModel& model, const HostInputs& inputs);
// One validated-or-not pass, answered on the host in `types` (warm-up, tools).
StatusOr<HostOutputs> Forward(const MhaModel& model, const HostInputs& inputs,
                              const OutputTypes& types);
// mha/head_analysis.h's AnalyzeHeads on the model's own weights.
StatusOr<HeadAnalysis> AnalyzeModelHeads(const MhaModel& model);

// Decoding sessions (mha/kv_cache.h, mha/decode.h) on host inputs.
// CheckStepInputs: query [cache rows, T, E], masks over the keys the step attends.
Status CheckSessionStep(const MhaModel& model, const KvCache& cache, bool cross,
                        const HostInputs& step);
// PrefillCross: the encoder's key [B, S, kdim] / value [B, S, vdim] projected into `cache`.
Status PrefillSession(const MhaModel& model, KvCache* cache, const HostTensor& key,
                      const HostTensor& value);

}  // namespace mha
