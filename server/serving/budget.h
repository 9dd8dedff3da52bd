// What one forward pass will cost, from the shapes alone, before anything is computed: the bytes
// of its response and the memory it works in. A request over either limit is refused with
// RESOURCE_EXHAUSTED saying the size, the limit and how to get under it; the batcher keeps a
// merged pass under the same work limit. Every product saturates instead of overflowing.
#pragma once

#include <cstdint>
#include <string>

#include "mha/engine.h"
#include "mha/host_io.h"
#include "mha/options.h"
#include "mha/status.h"

namespace mha::serve {

struct PassCost {
  int64_t response_bytes = 0;  // output + attention weights as encoded
  int64_t work_bytes = 0;      // peak tensors of the pass: projections, scores, masks, outputs
};

// `inputs` must be validated. `output` is the wire dtype; the model gives the compute dtype, the
// device and the block budget.
PassCost EstimatePassCost(const ModelInfo& model, DType output, const HostInputs& inputs);

// One pass as the work estimate sees it: `rows` rows of t queries and s keys (s' = s +
// extra_keys), `compute_bytes` per element, and the attention path the core takes for it
// (docs/core.md, "Blocked attention" and "What --max-work-bytes counts").
struct PassShape {
  int64_t embed_dim = 0, num_heads = 1, extra_keys = 0, compute_bytes = 4;
  int64_t rows = 0, t = 0, s = 0;
  // The probabilities are wanted (weights, head_stats or head_mask): on the CPU blocks of every
  // row and head, on a device the whole scores. Else blocks of one row and head on the CPU (one
  // block of everything when it fits), the fused kernel on a device.
  bool head_options = false;
  bool need_weights = false;  // the pass also keeps a whole [rows, H, t, s'] copy of them
  bool on_device = false;     // a CUDA device
  int64_t mask_heads = 0;     // on a device: the whole additive mask's heads (0 none, 1, or H)
  int64_t block_bytes = kDefaultAttentionBlockBytes;  // MhaOptions::attention_block_bytes
};
// The pass's shape for `model`: its heads, extra keys, compute dtype, device and block budget.
PassShape ModelPassShape(const ModelInfo& model, int64_t rows, int64_t t, int64_t s);

// The peak working memory of the pass: projections and outputs, plus on the CPU three blocks of
// scores (scores, mask, softmax; a block's rows from AttentionBlockRows, the function the core
// uses, as mha/attention_blocks.h chooses them) and on a device either the whole scores or the
// fused kernel's mask and row statistics.
int64_t PassWorkBytes(const PassShape& pass);

// RESOURCE_EXHAUSTED naming the estimate, the limit and what to change; OK when within both.
Status CheckPassCost(const PassCost& cost, const HostInputs& inputs, int64_t max_response_bytes,
                     int64_t max_work_bytes);

}  // namespace mha::serve
