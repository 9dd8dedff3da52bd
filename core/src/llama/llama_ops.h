// Private to mha_core: the steps of Llama-family attention shared by the stateless forward
// (llama_stack.cc) and the per-layer step over KV caches (llama_step.cc). Hugging Face's
// LlamaAttention in formulas (docs/afd.md):
//   q = x Wq^T (+ bq), k = x Wk^T (+ bk), v = x Wv^T (+ bv)      q: H heads, k and v: KV heads
//   RoPE at position p: inv_freq_i = theta^(-2i / D), angle = p * inv_freq (i < D/2, duplicated
//   to D), x' = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[D/2:], x[:D/2])
//   query head h attends with K/V head h / (H / KV) (repeat_kv), softmax(q k^T / sqrt(D) + causal)
//   out = concat_h(attn_h) Wo^T (+ bo)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "mha/llama_config.h"

namespace mha::internal {

// One layer placed for computing, its weights laid out once at load as the GEMMs read them
// (x W^T as x times a contiguous [in, out] matrix: OpenBLAS packs that layout for each call about
// twice as fast as the checkpoint's [out, in], and one GEMM on the fused weight is then at least as
// fast as three apart even for one row; docs/performance.md): the fused q/k/v projection
// transposed, [E, (H + 2 KV) * D], and its bias (attention_bias only); the output projection
// transposed, [H * D, E].
struct LlamaLayer {
  at::Tensor qkv_weight_t, qkv_bias;
  at::Tensor o_weight_t, o_bias;
};

// Projects rows x [N, E] into q [N, H * D], k and v [N, KV * D] (column views of one GEMM's
// output).
void ProjectQkv(const LlamaLayer& layer, const LlamaConfig& config, const at::Tensor& x,
                at::Tensor* q, at::Tensor* k, at::Tensor* v);

// cos and sin [N, D] of int64 `positions` [N] (on the tables' device), computed in float64 and
// cast to `dtype`.
void RopeTables(const at::Tensor& positions, const LlamaConfig& config, at::ScalarType dtype,
                at::Tensor* cos, at::Tensor* sin);

// x [..., N, heads, D] rotated by the tables [N, D] of its positions.
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Grouped-query attention: q [B, H, T, D] against k, v [B, KV, S, D] (KV divides H), the last T
// of the S keys being the queries' own when `causal` (bottom-right aligned: query t sees keys
// [0, S - T + t]). Query heads of one K/V head are stacked as rows of one matrix, so the keys are
// never repeated in memory. `key_mask`, when defined: additive [B, 1, 1, S] over the keys (padded
// caches, KvBatch::PaddingMask). Returns [B, T, H * D] (combine_heads layout).
at::Tensor GroupedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal, const at::Tensor& key_mask = at::Tensor());

}  // namespace mha::internal
