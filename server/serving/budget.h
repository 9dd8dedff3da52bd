// What one forward pass will cost, from the shapes alone, before anything is computed: the bytes
// of its response and the memory it works in. A request over either limit is refused with
// RESOURCE_EXHAUSTED saying the size, the limit and how to get under it; the batcher keeps a
// merged pass under the same work limit. Every product saturates instead of overflowing.
#pragma once

#include <cstdint>
#include <string>

#include "mha/host_io.h"
#include "mha/options.h"
#include "mha/status.h"

namespace mha::serve {

struct PassCost {
  int64_t response_bytes = 0;  // output + attention weights as encoded
  int64_t work_bytes = 0;      // peak tensors of the pass: projections, scores, masks, outputs
};

// `inputs` must be validated. `compute` is the dtype the math runs in, `output` the wire dtype.
PassCost EstimatePassCost(const MhaOptions& options, DType compute, DType output,
                          const HostInputs& inputs);

// The working memory of one pass over `rows` rows of t queries and s keys (s' = s + extra_keys),
// `compute_bytes` per element; the batcher checks merged passes with it.
int64_t PassWorkBytes(int64_t embed_dim, int64_t num_heads, int64_t extra_keys,
                      int64_t compute_bytes, int64_t rows, int64_t t, int64_t s, bool need_weights);

// RESOURCE_EXHAUSTED naming the estimate, the limit and what to change; OK when within both.
Status CheckPassCost(const PassCost& cost, const HostInputs& inputs, int64_t max_response_bytes,
                     int64_t max_work_bytes);

}  // namespace mha::serve
