// The model served when no --model-repository is given: the built-in model of the built-in kind
// (kinds/model_kind.h BuiltinKind; the one-layer MHA model of mha/engine.h BuildDefaultModel:
// E=512, H=8, bias, weights from a fixed seed, identical on every run and machine).
#pragma once

#include "server/serving/repository/model_repository.h"

namespace mha::serve {

inline constexpr char kDefaultModelName[] = "default";

// READY entry named "default" (or FAILED with the error, e.g. an unusable --device).
ModelEntry MakeDefaultModel(const LoadOverrides& overrides);

}  // namespace mha::serve
