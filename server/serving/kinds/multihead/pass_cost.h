// What one forward pass of a one-layer model will cost, from the shapes alone, before anything is
// computed: the bytes of its response and the memory it works in (budget.h). A request over either
// limit is refused (limits.h: CheckPassBytes) saying the size, the limit and how to get under it;
// the batcher keeps a merged pass under the same work limit.
#pragma once

#include <cstdint>
#include <string>

#include "mha/engine.h"
#include "mha/host_io.h"
#include "mha/status.h"
#include "server/serving/budget.h"

namespace mha::serve {

struct PassCost {
  int64_t response_bytes = 0;  // output + attention weights as encoded
  int64_t work_bytes = 0;      // peak tensors of the pass: projections, scores, masks, outputs
};

// `inputs` must be validated. `output` is the wire dtype; the model gives the compute dtype, the
// device and the block budget.
PassCost EstimatePassCost(const ModelInfo& model, DType output, const HostInputs& inputs);

// The pass's shape for `model`: its heads, extra keys, compute dtype, device and block budget.
PassShape ModelPassShape(const ModelInfo& model, int64_t rows, int64_t t, int64_t s);

// RESOURCE_EXHAUSTED naming the estimate, the limit and what to change; OK when within both.
Status CheckPassCost(const PassCost& cost, const HostInputs& inputs, int64_t max_response_bytes,
                     int64_t max_work_bytes);

}  // namespace mha::serve
