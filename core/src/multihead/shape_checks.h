// Shape and dtype checks run before any tensor op: every failure is INVALID_ARGUMENT naming the
// field, what was expected and what was given.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "mha/model.h"
#include "mha/options.h"
#include "mha/shape_string.h"
#include "mha/status.h"
#include "mha/weights.h"

namespace mha {

Status CheckWeightShapes(const MhaOptions& options, const MhaWeights& weights);
Status CheckForwardInputs(const MhaOptions& options, const ForwardInputs& inputs);

}  // namespace mha
