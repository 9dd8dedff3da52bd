// The tensors of one forward pass, batch-first, as the core computes them (LibTorch). Outside the
// core requests and answers travel as mha/host_io.h's HostInputs / HostOutputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/host_io.h"

namespace mha {

// Batch-first inputs. Undefined tensors mean "absent".
struct ForwardInputs {
  at::Tensor query;             // [B, T, E]
  at::Tensor key;               // [B, S, kdim]  (absent with value: self-attention)
  at::Tensor value;             // [B, S, vdim]
  at::Tensor key_padding_mask;  // [B, S]: bool (true = ignore) or float (additive)
  at::Tensor attn_mask;         // [T, S] or [B*H, T, S]: bool (true = masked) or float (additive)
  bool is_causal = false;       // adds triu(ones(T, S), 1) as -inf (top-left aligned)
  bool need_weights = false;
  bool average_attn_weights = true;    // weights [B, T, S] if true, per head [B, H, T, S] if false
  WeightsSelection weights_selection;  // needs need_weights
  std::optional<at::ScalarType> weights_dtype;  // unset = the outputs' dtype
  bool head_stats = false;  // entropy and max weight per [B, H, T] (no need_weights needed)
  at::Tensor head_mask;     // [H] or [B, H] floating: scales each head's probabilities
  // Whether anything beyond the plain weights is asked for (such passes are not merged).
  bool wants_head_options() const {
    return weights_selection.any() || weights_dtype || head_stats || head_mask.defined();
  }
};

// Model dtype. On a CPU model on the CPU; on a CUDA model on the host when the query was on the
// host (pinned when big: mha/device_stream.h), else on the model's device. Complete on return
// either way (the pass's stream is synchronized).
struct ForwardOutputs {
  at::Tensor output;           // [B, T, E]
  at::Tensor attn_weights;     // undefined unless need_weights (and no top-k): selected, if asked
  at::Tensor topk_values;      // weights_selection.top_k > 0: [B, (H'), rows, k], largest first
  at::Tensor topk_indices;     // the same shape, int32 or int64 key indices in [0, S')
  at::Tensor head_entropy;     // head_stats: [B, H, T] float32, nats
  at::Tensor head_max_weight;  // head_stats: [B, H, T] float32
};

}  // namespace mha
