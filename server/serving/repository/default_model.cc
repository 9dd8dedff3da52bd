#include "server/serving/repository/default_model.h"

#include <ATen/ATen.h>

#include <cmath>
#include <exception>

namespace mha::serve {
namespace {

constexpr uint64_t kSeed = 0x6d68612d73657276ULL;  // "mha-serv"

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
  uint64_t state = kSeed ^ (stream * 0xd1b54a32d192ed03ULL);
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

ModelEntry MakeDefaultModel(const LoadOverrides& overrides) {
  ModelEntry entry;
  entry.name = kDefaultModelName;
  entry.source = "builtin";
  entry.format = "builtin";
  entry.layout = "separate_proj";
  MhaOptions options;
  options.embed_dim = kDefaultEmbedDim;
  options.num_heads = kDefaultNumHeads;
  if (overrides.dtype) options.dtype = *overrides.dtype;
  if (overrides.device) options.device = *overrides.device;
  options.cuda_graphs = overrides.cuda_graphs;
  try {
    auto model = MhaModel::Create(options, DefaultModelWeights(kDefaultEmbedDim));
    if (!model.ok()) {
      entry.state = ModelState::kFailed;
      entry.error = model.status().ToString();
      return entry;
    }
    entry.model = std::shared_ptr<const MhaModel>(std::move(model.value()));
    entry.state = ModelState::kReady;
  } catch (const std::exception& e) {
    entry.state = ModelState::kFailed;
    entry.error = std::string("building the default model threw: ") + e.what();
  }
  return entry;
}

}  // namespace mha::serve
