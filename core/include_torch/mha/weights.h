// The parameters of one attention layer in PyTorch nn.MultiheadAttention's vocabulary,
// whatever layout they were stored in (packed in_proj, separate q/k/v, fused qkv Linear,
// W_q/W_k/W_v, q_proj/k_proj/v_proj). Linear weights are [out_features, in_features] as
// torch.nn.Linear stores them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace mha {

// Named tensors as read from a weights file (state-dict keys).
using TensorMap = std::map<std::string, at::Tensor>;

struct MhaWeights {
  at::Tensor q_weight;    // [E, E]
  at::Tensor k_weight;    // [E, kdim]
  at::Tensor v_weight;    // [E, vdim]
  at::Tensor q_bias;      // [E] or undefined (bias=False)
  at::Tensor k_bias;      // [E] or undefined
  at::Tensor v_bias;      // [E] or undefined
  at::Tensor out_weight;  // [E, E]  (W^O)
  at::Tensor out_bias;    // [E] or undefined
  at::Tensor bias_k;      // [1, 1, E] or undefined (add_bias_kv)
  at::Tensor bias_v;      // [1, 1, E] or undefined
};

// The default model's weights (mha/engine.h BuildDefaultModel): [E, E] projections and [E]
// biases, float32 from a fixed seed, identical on every run and machine (also for tests).
MhaWeights DefaultModelWeights(int64_t embed_dim);

}  // namespace mha
