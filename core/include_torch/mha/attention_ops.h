// The named steps of multi-head attention, in the vocabulary of the reference implementations:
// projection -> split_heads -> scaled dot-product attention -> combine_heads -> W^O.
// Tensors are batch-first; "heads" layout is [B, H, L, head_dim].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mha {

// [B, L, E] -> [B, H, L, E/H]: view then transpose (no copy).
at::Tensor split_heads(const at::Tensor& x, int64_t num_heads);

// [B, H, L, D] -> [B, L, H*D]: transpose then one contiguous copy; inverse of split_heads.
at::Tensor combine_heads(const at::Tensor& x);

// Self-attention's packed projection, split into heads in one pass as PyTorch's own
// nn.MultiheadAttention does (at::_transform_bias_rescale_qkv): x [B, T, E] times the packed
// weight [3E, E] (+ bias [3E], or none), then q, k, v [B, H, T, D], each contiguous, q already
// multiplied by 1/sqrt(D). One copy kernel where split_heads + attention_probs take a strided
// copy per operand, a separate q * scale and a transposed copy of K.
struct QkvHeads {
  at::Tensor q_scaled, k, v;
};
QkvHeads project_qkv_heads(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t num_heads);

// softmax(Q K^T / sqrt(D) + mask): the attention probabilities [B, H, T, S]. `mask` is additive,
// broadcastable to [B, H, T, S], or undefined. `q_scaled`: q is already multiplied by 1/sqrt(D)
// (project_qkv_heads).
at::Tensor attention_probs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask,
                           bool q_scaled = false);

// Per query row of `probs` [B, H, T, S]: the entropy -sum p ln p in nats (0 ln 0 = 0) and the
// largest probability, [B, H, T] each, in `probs`' dtype. One head at a time, so the temporary is
// [B, T, S], not [B, H, T, S]. A row of NaN (every key masked) gives NaN.
void head_statistics(const at::Tensor& probs, at::Tensor* entropy, at::Tensor* max_weight);

// `probs` [B, H, T, S] with head h of batch row b scaled by head_mask [H] or [B, H] (Hugging
// Face's head_mask: 0 drops the head before its probabilities meet V). A new tensor.
at::Tensor apply_head_mask(const at::Tensor& probs, const at::Tensor& head_mask);

// Explicit path, used when the weights are wanted: softmax(Q K^T / sqrt(D) + mask) V.
// `mask` is additive, broadcastable to [B, H, T, S], or undefined.
// Returns the per-head output [B, H, T, D]; `weights` receives [B, H, T, S].
at::Tensor attention_with_weights(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& mask, at::Tensor* weights);

// Fused kernel, used when no weights are wanted: at::_scaled_dot_product_attention (LibTorch 1.13)
// or at::scaled_dot_product_attention (2.x; flash / memory-efficient attention on CUDA).
// `mask` as above; `is_causal` only when no other mask is present (top-left aligned).
// One query row on CUDA (a decoding step) takes the explicit path instead: its key length grows
// by one every step, and LibTorch 2.x's cuDNN attention builds an execution plan for every new
// shape (on an H200, one session decoded at 52 ms a step; two small bmm and a softmax here).
at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask, bool is_causal);

// Whether the fused kernel is the faster choice for tensors like `q`. True on LibTorch 2.x and on
// CUDA. False on LibTorch 1.13's CPU build, whose "fused" op is a composite of the same matmul /
// softmax steps plus copies: measured ~30% slower than attention_with_weights at
// [8, 8, 128, 64] (bench/mha_core_bench BM_AttentionStep), so there the explicit path runs and
// its weights are dropped.
bool fused_kernel_preferred(const at::Tensor& q);
bool fused_kernel_preferred(const c10::Device& device);  // the same, for tensors on `device`

}  // namespace mha
