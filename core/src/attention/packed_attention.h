// Private to mha_core: the CPU pass of plain self-attention over short sequences without the
// tensors in between. The fused q/k/v projection [B·T, 3E] is read in place by the attention
// kernel of paged attention (paged_kernel.h: each batch row is one "page" of T keys, rows 3E floats
// apart), which writes [B·T, E] in combine_heads' layout for the output projection: no head split,
// no q * scale copy, no [B, H, T, S] scores tensor, no combine_heads copy. Both GEMMs multiply by
// weights MhaModel lays out at load: as panels (panel_gemm.h) or transposed for OpenBLAS
// (in_proj_weight_t, out_weight_t).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mha::internal {

// Short sequences only: the longest T the packed pass takes (the kernel keeps a [T, H, T] block
// of scores per batch row; longer passes go through the blocked path of mha/attention_blocks.h).
constexpr int64_t kPackedAttentionMaxT = 64;

struct PackedWeights {
  const at::Tensor* in_t = nullptr;      // [E, 3E] contiguous float32
  const at::Tensor* in_bias = nullptr;   // [3E] or undefined
  const at::Tensor* out_t = nullptr;     // [E, E] contiguous float32
  const at::Tensor* out_bias = nullptr;  // [E] or undefined
  // The same weights as panels (panel_gemm.h), or null: OpenBLAS's GEMM over in_t and out_t.
  const at::Tensor* in_panels = nullptr;
  const at::Tensor* out_panels = nullptr;
};

// softmax(q k^T / sqrt(D) (+ causal -inf above the diagonal, top-left)) v projected, for float32
// query [B, T, E] on the CPU: the output [B, T, E].
at::Tensor PackedSelfAttention(const at::Tensor& query, int64_t heads, bool causal,
                               const PackedWeights& w);

}  // namespace mha::internal
