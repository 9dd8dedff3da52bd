// Step-wise attention over a KV cache (decoding sessions): each step brings only the new tokens'
// queries; their keys and values are projected once and appended to the session's per-head cache
// ([B, H, S, head_dim], the split_heads layout), and the new queries attend over the whole
// cache. Decoding a sequence step by step (one token or several at a time) equals one causal
// forward over the whole sequence (MhaModel::Forward with is_causal).
//
//   self-attention:  new token i (absolute position L + i, L = tokens cached before the step)
//                    sees cached keys 0 .. L + i: the bottom-right-aligned causal mask
//                    triu(ones(T, S), S - T + 1) over S = L + T.
//   cross-attention: the encoder's key/value are projected once (PrefillCross) and reused; every
//                    new query sees every encoder key (no causal mask), as in a full forward.
//   add_bias_kv / add_zero_attn: bias_k/bias_v and the zero key are appended after the cached keys
//                    at every step, visible to every query, as PyTorch appends them after the keys
//                    and pads the masks with a zero column. Never cached.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "mha/forward_io.h"
#include "mha/kv_cache.h"
#include "mha/model.h"
#include "mha/status.h"

namespace mha {

// The inputs of one step. Masks cover every key the step attends (S_total): for self-attention
// the cache after this step's tokens (L + T), for cross-attention the encoder's S; extra keys of
// add_bias_kv / add_zero_attn are not counted (their columns are added as in PyTorch).
struct StepInputs {
  at::Tensor query;             // [B, T, E]: the new tokens only
  at::Tensor key_padding_mask;  // [B, S_total]: bool (true = ignore) or float (additive)
  at::Tensor attn_mask;         // [T, S_total] or [B*H, T, S_total]: bool or float
  bool need_weights = false;    // weights [B, (H,) T, S_total + extra keys]
  bool average_attn_weights = true;
};

// One session's step in a merged pass.
struct StepItem {
  KvCache* cache = nullptr;
  bool cross = false;  // the cache holds the encoder's keys (fixed) rather than past tokens
  const StepInputs* inputs = nullptr;
  ForwardOutputs* outputs = nullptr;
};

// INVALID_ARGUMENT naming the field and both shapes: query [cache rows, T >= 1, E] floating;
// masks over S_total as above.
Status CheckStepInputs(const MhaOptions& options, const KvCache& cache, bool cross,
                       const StepInputs& in);

// How DecodeSteps attends when it merges several sessions. kPerSession: each session over its
// own cache, no padding; where the pass allows it (float32 CPU pool, no masks, no weights, no
// add_bias_kv / add_zero_attn: mha/paged_attention.h) every session's attention reads its pages
// in place in one pass, else each session gets a gather of its blocks and a small matmul pair
// (kGather). On a device pool (a GPU) kPerSession takes kPadded where it applies: there each
// session's own append and gather copy block ids to the device and wait for the stream.
// kGather: that gather for every pass (the baseline of the paged path, kept for benchmarks and
// tests). kPadded: one append and one gather for every session, the caches padded to the longest
// and one batched attention with a padding mask; used only when there are several items, each
// one new token without masks or weights, and padding at most doubles the keys gathered (or they
// stay small), else kPerSession. Measured in bench/decode_steps_bench.cc (docs/sessions.md); the
// server uses kPerSession.
enum class StepAttention { kPerSession, kPadded, kGather };

// Whether `attention` asks for the padded pass over `pool`'s caches: kPadded, or kPerSession on a
// device pool (a GPU), where per-session appends and gathers each copy ids to the device and
// wait for the stream. The step paths (DecodeSteps, LlamaLayerStep) pad where it also applies.
bool PrefersPadded(StepAttention attention, const KvBlockPool& pool);

// Whether kPadded applies to these items: at least two, each one new token without masks or
// weights, all of one pool, and the padded keys at most twice the real ones or under 64 MiB of
// keys and values in all (a short session beside a long one is not padded to gigabytes).
bool PaddedAttentionApplies(const std::vector<StepItem>& items);

// Runs the steps of several sessions as one pass: the projections of every new token in one GEMM
// (on the fused in-projection weight where the model has one), each session's attention over its
// own cache (see StepAttention), one output projection. Self-attention items append their new
// keys/values first: each cache must have room (KvCache::Reserve(T)). Items must have passed
// CheckStepInputs and belong to distinct caches. LibTorch errors come back as INTERNAL, every
// cache back at its length before the call.
Status DecodeSteps(const MhaModel& model, const std::vector<StepItem>& items,
                   StepAttention attention = StepAttention::kPerSession);

// One session's step: DecodeSteps with one item.
Status DecodeStep(const MhaModel& model, KvCache* cache, bool cross, const StepInputs& in,
                  ForwardOutputs* out);

// Cross-attention sessions: projects the encoder's key [B, S, kdim] and value [B, S, vdim] into
// an empty cache (reserving its blocks: RESOURCE_EXHAUSTED when the pool is short).
// INVALID_ARGUMENT for shapes that do not fit the model or the cache's rows.
Status PrefillCross(const MhaModel& model, KvCache* cache, const at::Tensor& key,
                    const at::Tensor& value);

}  // namespace mha
