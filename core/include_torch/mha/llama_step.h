// One layer's step for several sessions at once (the attention side of attention-FFN
// disaggregation, docs/afd.md): each item brings a session's hidden states for its new tokens at
// one layer ([t, E]: t = 1 for a decode step, more for a prefill chunk) and that session's KV cache
// of the layer. One pass: the new rows of every item projected together, RoPE at each item's own
// positions (from its cache's length on), their keys and values appended to each cache, each item
// attending over its own cache (causal within its new tokens), one output projection. Item i's
// output equals rows [L, L + t) of the stateless causal forward of that layer over the session's
// whole sequence (L = the cache's length before the step).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "mha/decode.h"
#include "mha/kv_cache.h"
#include "mha/llama_stack.h"
#include "mha/status.h"

namespace mha {

struct LlamaStepItem {
  // The session's cache for the step's layer: one row, from a pool of the stack's kv_layout(),
  // with room for t more tokens (KvCache::Reserve(t); LlamaSessionCache::Prepare does both).
  KvCache* cache = nullptr;
  at::Tensor hidden;             // [t >= 1, E] floating: the layer's input rows of the new tokens
  at::Tensor* output = nullptr;  // set to [t, E] in the stack's dtype, on hidden's device
};

// INVALID_ARGUMENT naming the entry ("entry 2: ...", items[2]) and the numbers: layer in range, a
// cache with one row from a pool of the stack's layout (heads, head_dim, dtype, device), hidden [t
// >= 1, E] floating, an output, no cache twice in one step. The pool's cache dtype may be any
// (mha/kv_cache_dtype.h): its layout's dtype is the stack's compute dtype.
Status CheckLlamaStep(const LlamaAttentionStack& stack, int64_t layer,
                      const std::vector<LlamaStepItem>& items);

// Whether a step of `items` reads the pages in place (mha/paged_attention.h): CPU pages of a
// float32 stack (PagedPoolSupported), one pool, at most kMaxPagedTokens new tokens per item; any
// number of query heads per K/V head (each K/V row of a block is met by its whole group while in
// L1: bench/llama_step_bench.cc, docs/performance.md, the Llama step's roofline). Other steps
// gather each cache.
bool LlamaPagedApplies(const LlamaConfig& config, const std::vector<LlamaStepItem>& items);

// Whether a step of `items` may attend padded (mha/decode.h's kPadded): at least two items of one
// pool, each one new token, and the padding within KvBatch::PaddingFits.
bool LlamaPaddedApplies(const std::vector<LlamaStepItem>& items);

// Runs `items` (which passed CheckLlamaStep, each cache with room for its tokens) as one pass of
// `layer`. `attention`: kPerSession reads the pages in place where LlamaPagedApplies; else, on a
// device pool (a GPU), one padded attention where LlamaPaddedApplies (one gather and one append
// for every cache: per-cache ones copy ids to the device and wait for the stream, each); else
// gathers each cache. kGather always gathers (tests, benchmarks); kPadded attends padded where
// LlamaPaddedApplies, on any device, else as kPerSession. LibTorch errors come back as INTERNAL
// with every cache back at its length before the call.
Status LlamaLayerStep(const LlamaAttentionStack& stack, int64_t layer,
                      const std::vector<LlamaStepItem>& items,
                      StepAttention attention = StepAttention::kPerSession);

}  // namespace mha
