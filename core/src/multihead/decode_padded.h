// DecodeSteps' padded path (StepAttention::kPadded, and kPerSession's choice on a device pool:
// mha/decode.h): every session's one new token attends its cache in one batched attention over
// the caches padded to the longest, with one append and one gather for all of them (kv_batch.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "mha/decode.h"

namespace mha::internal {

// Appends every self-attention item's new key/value and attends all rows in one pass.
// q/k/v_all: [N, E], one row per item row. Returns combine_heads of the output, [N, E].
at::Tensor AttendPadded(const MhaModel& model, const std::vector<StepItem>& items,
                        const at::Tensor& q_all, const at::Tensor& k_all, const at::Tensor& v_all);

}  // namespace mha::internal
