// The model served when no --model-repository is given: E=512, H=8, bias, weights from a fixed
// seed (splitmix64 -> uniform(-1/sqrt(E), 1/sqrt(E))), identical on every run and machine.
#pragma once

#include "server/serving/repository/model_repository.h"

namespace mha::serve {

inline constexpr char kDefaultModelName[] = "default";
inline constexpr int64_t kDefaultEmbedDim = 512;
inline constexpr int64_t kDefaultNumHeads = 8;

// READY entry named "default" (or FAILED with the error, e.g. an unusable --device).
ModelEntry MakeDefaultModel(const LoadOverrides& overrides);

// The deterministic weights themselves (exposed for tests and benchmarks).
MhaWeights DefaultModelWeights(int64_t embed_dim);

}  // namespace mha::serve
