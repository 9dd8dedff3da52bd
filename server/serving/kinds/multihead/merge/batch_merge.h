// Merging requests of one model into a single forward pass and slicing the answers back (the
// serving layer's merge/split: with merge/pass_runner.cc the only serving code that sees LibTorch).
// Exact by construction: every request keeps its own masks (made additive and written into its
// rows of a merged [rows*H, T_max, S_max] mask), padded keys are masked through key_padding_mask
// (-inf), padded query rows are dropped when slicing, and only requests with the same GroupKey
// (batch_assembly.h) are ever merged.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "mha/forward_io.h"
#include "server/serving/kinds/multihead/batch_assembly.h"

namespace mha::serve {

// One merged forward pass.
struct MergedBatch {
  ForwardInputs inputs;              // [rows, T_max, E] etc.
  std::vector<RequestShape> parts;   // each request's own shape, in order
  std::vector<int64_t> row_offsets;  // first merged row of each request
  int64_t t_max = 0, s_max = 0;
  bool cross = false;
};

// Merges requests of one GroupKey (at least one). Throws c10::Error / std::exception on tensor
// errors (the caller then runs the requests one by one).
MergedBatch MergeInputs(const std::vector<const ForwardInputs*>& requests,
                        const BatchModelInfo& info);

// Request i's output [B_i, T_i, E] and weights ([B_i, T_i, S_i'] or [B_i, H, T_i, S_i'] with
// S_i' = S_i + extra_keys: columns [0, S_i) plus the last extra_keys columns), as tensors of their
// own (not views of the merged ones).
std::vector<ForwardOutputs> SplitOutputs(const MergedBatch& batch, const ForwardOutputs& merged,
                                         const BatchModelInfo& info);

}  // namespace mha::serve
