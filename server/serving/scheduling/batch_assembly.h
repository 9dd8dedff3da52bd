// Merging requests of one model into a single forward pass and slicing the answers back, for the
// dynamic batcher. Exact by construction: every request keeps its own masks (made additive and
// written into its rows of a merged [rows*H, T_max, S_max] mask), padded keys are masked through
// key_padding_mask (-inf), padded query rows are dropped when slicing, and only requests with the
// same GroupKey (self/cross, causal, weights flags, dtypes, length bucket) are ever merged.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "mha/model.h"

namespace mha::serve {

// What merging needs to know about the model.
struct BatchModelInfo {
  int64_t num_heads = 1;
  int64_t extra_keys = 0;                  // add_bias_kv + add_zero_attn (keys appended after S)
  at::ScalarType mask_dtype = at::kFloat;  // the model's compute dtype (masks are made additive)
  int64_t embed_dim = 0;                   // with num_heads: the working memory of a pass
};
BatchModelInfo MakeBatchModelInfo(const MhaModel& model);

// Lengths are grouped so that padding stays small: up to 8 -> 8, then multiples of
// max(8, next_pow2(L) / 8), i.e. buckets at most ~1/8 of the length wide (17 -> 24, 64 -> 64,
// 65 -> 80, 100 -> 112, 200 -> 224, 1000 -> 1024). Measured on the 2-core box (64 clients, T
// uniform 8..64): 8-wide buckets up to 64 gave padding efficiency 0.92 vs 0.85 with 16-wide ones
// at equal or better throughput; 32-wide ones lost ~15%.
int64_t LengthBucket(int64_t length);

// Requests that may share one forward pass have equal keys. Everything that changes the math
// (self vs cross, causal, weights flags, input dtypes) is part of it; so are the length buckets.
struct GroupKey {
  bool cross = false;
  bool is_causal = false;
  bool need_weights = false;
  bool average_attn_weights = false;  // only meaningful with need_weights (false otherwise)
  int8_t query_dtype = -1, key_dtype = -1, value_dtype = -1;
  int64_t t_bucket = 0, s_bucket = 0;  // s_bucket 0 for self-attention
  // Head options (weights selection, head_stats, head_mask: ForwardInputs::wants_head_options)
  // are per request: such a request runs alone, never merged.
  bool solo = false;
  // Decoding-session steps (InferenceTask::step): 1 = a decode step (one new token per row),
  // 2 = a prefill chunk (several); 0 = a stateless request. Steps merge across sessions whatever
  // their cache lengths (DecodeSteps), decode steps apart from prefill chunks.
  int8_t session = 0;
  bool operator==(const GroupKey& other) const;
  bool operator!=(const GroupKey& other) const { return !(*this == other); }
};
// `in` must be validated (MhaModel::ValidateInputs): rank-3 query, key/value pair, masks.
GroupKey MakeGroupKey(const ForwardInputs& in);
// The key of a session step whose new tokens are `query` [B, T, E].
GroupKey MakeStepGroupKey(const at::Tensor& query, bool cross);

// Rows (B), query length T and key length S (S = T for self-attention) of a request.
struct RequestShape {
  int64_t rows = 0, t = 0, s = 0;
};
RequestShape ShapeOf(const ForwardInputs& in);

// Tokens a pass computes: query rows, plus key rows for cross-attention (self-attention keys are
// the query). `real` without padding, `padded` with every request padded to T_max / S_max.
struct TokenCount {
  int64_t real = 0, padded = 0;
};
TokenCount CountTokens(const std::vector<RequestShape>& shapes, bool cross);

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
