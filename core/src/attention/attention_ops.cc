#include "mha/attention_ops.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>

namespace mha {

at::Tensor split_heads(const at::Tensor& x, int64_t num_heads) {
  const int64_t batch = x.size(0), len = x.size(1), embed = x.size(2);
  // reshape == view when possible; the q/k/v slices of a fused projection are viewable.
  return x.reshape({batch, len, num_heads, embed / num_heads}).transpose(1, 2);
}

at::Tensor combine_heads(const at::Tensor& x) {
  const int64_t batch = x.size(0), heads = x.size(1), len = x.size(2), head_dim = x.size(3);
  return x.transpose(1, 2).contiguous().view({batch, len, heads * head_dim});
}

QkvHeads project_qkv_heads(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t num_heads) {
  const at::Tensor packed = at::linear(x, weight).contiguous();  // [B, T, 3E], bias added below
  const at::Tensor b = bias.defined() ? bias : at::zeros({weight.size(0)}, packed.options());
  auto qkv = at::_transform_bias_rescale_qkv(packed, b, num_heads);  // [B, H, T, D] each
  return QkvHeads{std::move(std::get<0>(qkv)), std::move(std::get<1>(qkv)),
                  std::move(std::get<2>(qkv))};
}

at::Tensor attention_probs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask,
                           bool q_scaled) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // [B, H, T, S]; with contiguous q and k (project_qkv_heads) no operand is copied.
  at::Tensor scores = at::matmul(q_scaled ? q : q * scale, k.transpose(-2, -1));
  if (mask.defined()) scores.add_(mask);
  return at::softmax(scores, -1);
}

void head_statistics(const at::Tensor& probs, at::Tensor* entropy, at::Tensor* max_weight) {
  const int64_t batch = probs.size(0), heads = probs.size(1), rows = probs.size(2);
  *entropy = at::empty({batch, heads, rows}, probs.options());
  for (int64_t h = 0; h < heads; ++h) {
    const at::Tensor p = probs.select(1, h);  // [B, T, S], a view
    entropy->select(1, h).copy_(at::xlogy(p, p).sum(-1).neg_());
  }
  *max_weight = std::get<0>(probs.max(-1));
}

at::Tensor apply_head_mask(const at::Tensor& probs, const at::Tensor& head_mask) {
  const int64_t heads = probs.size(1);
  const at::Tensor scale = head_mask.to(probs.device(), probs.scalar_type());
  return probs * (scale.dim() == 1 ? scale.view({1, heads, 1, 1})
                                   : scale.view({probs.size(0), heads, 1, 1}));
}

at::Tensor attention_with_weights(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& mask, at::Tensor* weights) {
  at::Tensor probs = attention_probs(q, k, mask);
  at::Tensor out = at::matmul(probs, v);
  *weights = std::move(probs);
  return out;
}

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask, bool is_causal) {
  if (q.is_cuda() && q.size(-2) == 1 && !is_causal) {  // a decoding step (see the header)
    at::Tensor weights;
    return attention_with_weights(q, k, v, mask, &weights);
  }
#if TORCH_VERSION_MAJOR >= 2
  // The mask goes in as a Tensor or as {}, never as a named optional type: the parameter is
  // c10::optional<Tensor> up to 2.2 and std::optional<Tensor> after (c10::optional being kept only
  // as a deprecated alias), and both convert. Trailing parameters (scale, enable_gqa) keep their
  // defaults.
  if (mask.defined()) {
    return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, is_causal);
  }
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, is_causal);
#else
  c10::optional<at::Tensor> attn_mask;
  if (mask.defined()) attn_mask = mask;
  // 1.13 reads a bool mask as "keep"; callers pass additive float masks only.
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, attn_mask, /*dropout_p=*/0.0,
                                                       /*need_attn_weights=*/false, is_causal));
#endif
}

bool fused_kernel_preferred(const at::Tensor& q) { return fused_kernel_preferred(q.device()); }

bool fused_kernel_preferred(const c10::Device& device) {
#if TORCH_VERSION_MAJOR >= 2
  (void)device;
  return true;
#else
  return device.is_cuda();
#endif
}

}  // namespace mha
