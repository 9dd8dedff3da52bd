// Decode-step attention that reads a session's KV pages where they lie (docs/sessions.md): no
// gather of the cache into [B, H, S, head_dim], no mask tensor, no per-head temporaries. For each
// sequence (a session's batch row) the new tokens' queries meet the cached keys block by block
// (scores for every head from one pass over each token's key row), a softmax per head and query,
// then the values block by block, written straight into the combine_heads layout [N, E].
//
// Exact in the sense of the rest of mha_core: fp32 throughout, the same math as
// attention_with_weights (softmax(q k^T / sqrt(D)) v) with the bottom-right-aligned causal
// visibility of mha/decode.h; only the summation order differs (covered by
// tests/unit/core/decode_paged_test.cc against PyTorch fixtures, <= 1e-5). Pages in a smaller
// cache dtype (mha/kv_cache_dtype.h) are decoded as they are read: the answer is the attention
// over the decoded keys and values (KvCache::Keys / Values), within the same 1e-5.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "mha/decode.h"
#include "mha/model.h"

namespace mha {

// Up to this many new tokens per item the pages are read in place; longer chunks (prefills) take
// the gather and BLAS's matmuls, which win once each key row serves enough queries. Measured with
// bench/decode_steps_bench.cc BM_DecodeChunk (cache 512, E=512 H=8, one thread, CPU time, paged
// vs gather): 1 token 389 vs 667 us, 4 tokens 1115 vs 1366 us, 8 tokens 1550 vs 1288 us.
constexpr int64_t kMaxPagedTokens = 4;

// Whether `pool`'s pages can be read in place: on the CPU, for a float32 model, in a cache dtype
// the kernel decodes (float32, bfloat16, float16, int8).
bool PagedPoolSupported(const KvBlockPool& pool);

// Whether PagedAttention serves `items`: one CPU float32 pool for all, no add_bias_kv /
// add_zero_attn, and no item with more than kMaxPagedTokens new tokens, masks or need_weights
// (such passes take the gather path in decode.cc).
bool PagedAttentionApplies(const MhaModel& model, const std::vector<StepItem>& items);

// Every item's attention over its cache. Self-attention items must have appended their new
// keys/values already (the cache's last T tokens are the step's). q_all: [N, E] float32 (any row
// stride, unit column stride), the items' new tokens in item order, N = sum of B * T. Returns
// [N, E]: the per-head outputs in combine_heads layout, ready for the output projection.
at::Tensor PagedAttention(const MhaModel& model, const std::vector<StepItem>& items,
                          const at::Tensor& q_all);

// One item of a paged pass, without a model: every row of `cache`, whose last `tokens` positions
// are the item's new tokens (appended already); causal: token t sees keys [0, S - T + 1 + t)
// (self-attention), else every key (cross-attention).
struct PagedItem {
  const KvCache* cache = nullptr;
  int64_t tokens = 0;
  bool causal = true;
};

// The same pass for `query_heads` query heads over pages of the pool's K/V heads, a divisor of
// query_heads: query head h reads K/V head h / (query_heads / pool.heads()) (grouped-query
// attention; Hugging Face's repeat_kv). q_all: [N, query_heads * D] float32 on the CPU (any row
// stride, unit column stride), the items' rows in order (N = sum of rows * tokens). Returns
// [N, query_heads * D] in combine_heads layout. Throws c10::Error on misuse.
at::Tensor PagedAttention(const KvBlockPool& pool, int64_t query_heads,
                          const std::vector<PagedItem>& items, const at::Tensor& q_all);

}  // namespace mha
