// The tensors of one forward pass, batch-first. Header-only: the client's at::Tensor layer uses
// them without linking mha_core.
#pragma once

#include <ATen/core/Tensor.h>

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
  bool average_attn_weights = true;  // weights [B, T, S] if true, per head [B, H, T, S] if false
};

// Model dtype. On a CPU model on the CPU; on a CUDA model on the host when the query was on the
// host (pinned when big: mha/device_stream.h), else on the model's device. Complete on return
// either way (the pass's stream is synchronized).
struct ForwardOutputs {
  at::Tensor output;        // [B, T, E]
  at::Tensor attn_weights;  // undefined unless need_weights
};

}  // namespace mha
