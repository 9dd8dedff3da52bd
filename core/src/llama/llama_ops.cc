#include "llama/llama_ops.h"

#include <ATen/ATen.h>

#include <limits>

#include "attention/panel_gemm.h"
#include "mha/attention_blocks.h"
#include "mha/attention_ops.h"
#include "mha/options.h"

namespace mha::internal {
namespace {

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

void ProjectQkv(const LlamaLayer& layer, const LlamaConfig& config, const at::Tensor& x,
                at::Tensor* q, at::Tensor* k, at::Tensor* v) {
  const at::Tensor qkv = LinearT(x, layer.qkv_weight_t, layer.qkv_bias);
  *q = qkv.narrow(1, 0, config.q_dim());
  *k = qkv.narrow(1, config.q_dim(), config.kv_dim());
  *v = qkv.narrow(1, config.q_dim() + config.kv_dim(), config.kv_dim());
}

void RopeTables(const at::Tensor& positions, const LlamaConfig& config, at::ScalarType dtype,
                at::Tensor* cos, at::Tensor* sin) {
  const int64_t d = config.head_dim;
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(positions.device());
  // inv_freq_i = 1 / theta^(2i / D), i < D / 2 (Hugging Face's default rotary embedding).
  const at::Tensor inv_freq = at::pow(config.rope_theta, at::arange(0, d, 2, f64) / d).reciprocal();
  const at::Tensor angles = positions.to(at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);
  const at::Tensor emb = at::cat({angles, angles}, -1);  // [N, D]
  *cos = emb.cos().to(dtype);
  *sin = emb.sin().to(dtype);
}

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos.unsqueeze(-2) + RotateHalf(x) * sin.unsqueeze(-2);
}

at::Tensor GroupedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal, const at::Tensor& key_mask) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t kv = k.size(1), s = k.size(2), group = h / kv;
  // Query head h = j * group + g (repeat_kv's order) becomes rows [g * T, (g + 1) * T) of K/V
  // head j's query matrix.
  const at::Tensor qg = q.reshape({b, kv, group * t, d});
  // On the CPU, a prefill too long for one block of scores: blocks of one group's query rows at a
  // time (mha/attention_blocks.h), each group's rows with the same causal diagonal.
  const int64_t rows = q.is_cuda() ? group * t
                                   : AttentionBlockRows(b, kv, group * t, s, q.element_size(),
                                                        kDefaultAttentionBlockBytes);
  if (rows < group * t) {
    MaskParts mask;
    mask.options = q.options();
    if (key_mask.defined()) mask.terms.push_back(key_mask);  // [B, 1, 1, S]
    if (causal && t > 1) mask.causal_diagonal = s - t + 1;
    const at::Tensor kc = k.contiguous(), vc = v.contiguous();  // once, not once per group
    at::Tensor out = at::empty({b, kv, group, t, d}, q.options());
    for (int64_t g = 0; g < group; ++g) {
      out.select(2, g).copy_(blocked_attention(qg.narrow(2, g * t, t), kc, vc, mask, false,
                                               kDefaultAttentionBlockBytes));
    }
    return combine_heads(out.view({b, h, t, d}));
  }
  at::Tensor mask;
  if (causal && t > 1) {  // one new token sees every key: no mask
    mask = at::full({t, s}, -std::numeric_limits<double>::infinity(), q.options()).triu(s - t + 1);
    if (group > 1) mask = mask.repeat({group, 1});
  }
  if (key_mask.defined()) mask = mask.defined() ? mask + key_mask : key_mask;  // [B, 1, 1, S]
  // A decoding step on CUDA (one new token: `group` rows per K/V head) takes the explicit path,
  // as fused_attention does for one row: its key length grows every step, and LibTorch 2.x's
  // cuDNN attention would build an execution plan for each new length (mha/attention_ops.h).
  const bool cuda_step = q.is_cuda() && t == 1;
  at::Tensor out;
  if (!cuda_step && fused_kernel_preferred(qg)) {
    out = fused_attention(qg, k, v, mask, /*is_causal=*/false);
  } else {
    at::Tensor weights;
    out = attention_with_weights(qg, k, v, mask, &weights);
  }
  return combine_heads(out.reshape({b, h, t, d}));
}

}  // namespace mha::internal
