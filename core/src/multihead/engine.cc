// mha/engine.h: the torch-free face of the core, over MhaModel, the loader and the session caches.
#include "mha/engine.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <exception>
#include <utility>

#include "device/guarded.h"
#include "mha/decode.h"
#include "mha/kv_cache.h"
#include "mha/loader.h"
#include "mha/model.h"
#include "mha/tensor_adapter.h"

namespace mha {

namespace {

StatusOr<LoadedModel> Build(const MhaOptions& options, MhaWeights weights) {
  auto model = MhaModel::Create(options, std::move(weights));
  if (!model.ok()) return model.status();
  LoadedModel loaded;
  loaded.model = std::shared_ptr<const MhaModel>(std::move(model.value()));
  loaded.info = DescribeModel(*loaded.model);
  return loaded;
}

constexpr uint64_t kDefaultSeed = 0x6d68612d73657276ULL;  // "mha-serv"

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A [rows, cols] (or [rows] when cols == 0) float32 tensor, uniform in (-bound, bound).
at::Tensor Uniform(uint64_t stream, int64_t rows, int64_t cols, float bound) {
  const int64_t n = rows * (cols > 0 ? cols : 1);
  at::Tensor t = cols > 0 ? at::empty({rows, cols}, at::kFloat) : at::empty({rows}, at::kFloat);
  float* data = t.data_ptr<float>();
  uint64_t state = kDefaultSeed ^ (stream * 0xd1b54a32d192ed03ULL);
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(SplitMix64(&state) >> 11) * 0x1.0p-53;  // [0, 1)
    data[i] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
  return t;
}

}  // namespace

MhaWeights DefaultModelWeights(int64_t e) {
  const float w = 1.0f / std::sqrt(static_cast<float>(e));
  MhaWeights weights;
  weights.q_weight = Uniform(1, e, e, w);
  weights.k_weight = Uniform(2, e, e, w);
  weights.v_weight = Uniform(3, e, e, w);
  weights.out_weight = Uniform(4, e, e, w);
  weights.q_bias = Uniform(5, e, 0, 0.1f);
  weights.k_bias = Uniform(6, e, 0, 0.1f);
  weights.v_bias = Uniform(7, e, 0, 0.1f);
  weights.out_bias = Uniform(8, e, 0, 0.1f);
  return weights;
}

ModelInfo DescribeModel(const MhaModel& model) {
  ModelInfo info{model.options(), model.device(), model.compute_dtype(), model.parameter_count()};
  const CudaGraphCache* graphs = model.cuda_graph_cache();
  if (graphs != nullptr && graphs->Enabled()) {
    info.cuda_graph_max_tokens = graphs->options().max_tokens;
    info.cuda_graph_max_graphs = graphs->options().max_graphs;
    info.cuda_graphs_shared = CudaGraphCache::SharedAcrossStreams();
  }
  return info;
}

StatusOr<LoadedModel> LoadModel(const LoadOptions& options) {
  StatusOr<LoadedModel> result = Internal("LoadModel: not run");
  const Status status = Guarded("loading the model", [&] {
    auto weights = LoadWeights(options);
    if (!weights.ok()) return weights.status();
    auto loaded = Build(weights->options, std::move(weights->weights));
    if (!loaded.ok()) return loaded.status();
    loaded->format = WeightsFormatName(weights->format);
    loaded->layout = weights->layout;
    loaded->unused_keys = weights->unused_keys;
    result = std::move(loaded);
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return result;
}

StatusOr<LoadedModel> BuildDefaultModel(const MhaOptions& options) {
  StatusOr<LoadedModel> result = Internal("BuildDefaultModel: not run");
  const Status status = Guarded("building the default model", [&] {
    auto loaded = Build(options, DefaultModelWeights(options.embed_dim));
    if (!loaded.ok()) return loaded.status();
    loaded->format = "builtin";
    loaded->layout = "separate_proj";
    result = std::move(loaded);
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return result;
}

Status ValidateInputs(const MhaModel& model, const HostInputs& inputs) {
  return Guarded("validating the request",
                 [&] { return model.ValidateInputs(ToForwardInputs(inputs)); });
}

StatusOr<HostOutputs> Forward(const MhaModel& model, const HostInputs& inputs,
                              const OutputTypes& types) {
  HostOutputs host;
  const Status status = Guarded("the forward pass", [&] {
    ForwardOutputs out;
    MHA_RETURN_IF_ERROR(model.Forward(ToForwardInputs(inputs), &out));
    host = ToHostOutputs(out, types);
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return host;
}

StatusOr<HeadAnalysis> AnalyzeModelHeads(const MhaModel& model) {
  return AnalyzeHeads(model.options(), model.weights());
}

Status CheckSessionStep(const MhaModel& model, const KvCache& cache, bool cross,
                        const HostInputs& step) {
  return Guarded("checking the step", [&] {
    return CheckStepInputs(model.options(), cache, cross, ToStepInputs(step));
  });
}

Status PrefillSession(const MhaModel& model, KvCache* cache, const HostTensor& key,
                      const HostTensor& value) {
  return Guarded("the cross-attention prefill",
                 [&] { return PrefillCross(model, cache, ToTensor(key), ToTensor(value)); });
}

}  // namespace mha
