// Which requests of one model may share a forward pass, and their sizes, for the dynamic batcher.
// Torch-free: the tensors are merged and sliced by merge/batch_merge.h; only requests with the same
// GroupKey (self/cross, causal, weights flags, dtypes, length bucket) are ever merged.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/engine.h"
#include "mha/host_io.h"

namespace mha::serve {

// What merging needs to know about the model.
struct BatchModelInfo {
  int64_t num_heads = 1;
  int64_t extra_keys = 0;              // add_bias_kv + add_zero_attn (keys appended after S)
  DType mask_dtype = DType::kFloat32;  // the model's compute dtype (masks are made additive)
  int64_t embed_dim = 0;               // with num_heads: the working memory of a pass
  bool on_device = false;              // a CUDA device (budget.h's PassShape)
  int64_t block_bytes = kDefaultAttentionBlockBytes;  // MhaOptions::attention_block_bytes
};
BatchModelInfo MakeBatchModelInfo(const ModelInfo& model);

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
// `in` must be validated (mha::ValidateInputs): rank-3 query, key/value pair, masks.
GroupKey MakeGroupKey(const HostInputs& in);
// The key of a session step whose new tokens are `query` [B, T, E].
GroupKey MakeStepGroupKey(const HostTensor& query, bool cross);

// Rows (B), query length T and key length S (S = T for self-attention) of a request.
struct RequestShape {
  int64_t rows = 0, t = 0, s = 0;
};
RequestShape ShapeOf(const HostInputs& in);

// Tokens a pass computes: query rows, plus key rows for cross-attention (self-attention keys are
// the query). `real` without padding, `padded` with every request padded to T_max / S_max.
struct TokenCount {
  int64_t real = 0, padded = 0;
};
TokenCount CountTokens(const std::vector<RequestShape>& shapes, bool cross);

}  // namespace mha::serve
