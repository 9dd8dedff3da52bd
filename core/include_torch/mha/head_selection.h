// Attention weights that fit through the wire (docs/heads.md): the selection of query rows, heads
// and top-k applied to a pass's probabilities on their device, and the checks of the head options
// (weights_*, head_stats, head_mask) against a model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "mha/forward_io.h"
#include "mha/options.h"
#include "mha/status.h"

namespace mha {

// INVALID_ARGUMENT naming the field and the numbers: a head index outside [0, H) or repeated, an
// empty or out-of-range row range, k <= 0 or > S', a selection without need_weights, a head_mask
// that is not floating [H] or [B, H]. `keys` is S' (S plus the keys add_bias_kv / add_zero_attn
// append). The rest of `in` must have passed the shape checks.
Status CheckHeadOptions(const MhaOptions& options, const ForwardInputs& in, int64_t keys);

// The weights a request gets from `probs` [B, H, T, S'] (after head_mask): rows narrowed (a
// view), heads picked (a copy of just those), averaged over the heads kept when `average`, then
// either top-k (values + int32/int64 indices) or the dense selection; values cast to `dtype`.
// Fills out->attn_weights, or out->topk_values and out->topk_indices. Selection first, copies
// after: the dense [B, H, T, S'] tensor is never copied when a selection makes it unnecessary.
void SelectWeights(const at::Tensor& probs, const WeightsSelection& selection, bool average,
                   at::ScalarType dtype, ForwardOutputs* out);

// SelectWeights for a block of a pass over `t` query rows: `probs` [B, H, rows, S'] are the rows
// [begin, begin + rows). What the selection keeps of them is written at its rows into `out`'s
// tensors, allocated whole (in `dtype`) by the first block that selects any: a blocked pass's
// weights are one buffer, filled once. Blocks outside the selected rows do nothing.
void SelectWeightsRows(const at::Tensor& probs, int64_t begin, int64_t t,
                       const WeightsSelection& selection, bool average, at::ScalarType dtype,
                       ForwardOutputs* out);

}  // namespace mha
