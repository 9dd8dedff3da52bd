// The request and answer of one forward pass (or one session step) as the serving layer and the
// front ends carry them: host tensors (mha/host_tensor.h), no LibTorch. The core turns them into
// ForwardInputs / ForwardOutputs (mha/forward_io.h) and back in one place (mha/tensor_adapter.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mha/host_tensor.h"

namespace mha {

// Which attention weights leave the pass (docs/heads.md). Applied on the pass's device before
// anything is copied, in this order: query rows, heads, average over the heads kept, top-k.
struct WeightsSelection {
  std::vector<int64_t> heads;          // empty = every head; else indices in [0, H), in this order
  std::optional<int64_t> query_begin;  // rows [begin, end) of T; unset = 0 / T
  std::optional<int64_t> query_end;
  int64_t top_k = 0;  // > 0: the k largest weights per row (values + indices) instead of dense
  bool topk_indices_int64 = false;  // indices as int64 (torch.topk's) instead of int32
  bool any() const { return !heads.empty() || query_begin || query_end || top_k > 0; }
};

// Shape of the weights a selection leaves (dense, or the top-k values'), for budgets: `batch` rows
// of `t` queries over `keys` keys (S plus what add_bias_kv / add_zero_attn append).
struct SelectedShape {
  int64_t batch = 0, heads = 0, rows = 0, columns = 0;  // heads 0 when averaged
  int64_t numel() const { return batch * (heads > 0 ? heads : 1) * rows * columns; }
};
inline SelectedShape SelectedWeightsShape(const WeightsSelection& s, bool average, int64_t batch,
                                          int64_t t, int64_t num_heads, int64_t keys) {
  SelectedShape shape;
  shape.batch = batch;
  shape.heads = average ? 0 : (s.heads.empty() ? num_heads : static_cast<int64_t>(s.heads.size()));
  shape.rows = s.query_end.value_or(t) - s.query_begin.value_or(0);
  shape.columns = s.top_k > 0 ? s.top_k : keys;
  return shape;
}

// Where an output is to be written on a CUDA device (a CUDA shared-memory region's slice,
// mha/device_memory.h): the core copies the answer there device to device, synchronized before
// the answer leaves it, and answers a HostTensor::DeviceView of it. Undefined: answer on the host.
// An answer larger than `bytes` is answered on the host instead (the front end refuses it).
struct DevicePlace {
  void* data = nullptr;
  size_t bytes = 0;
  int device = -1;
  std::shared_ptr<const void> owner;  // keeps the region open while the pass writes
  bool defined() const { return data != nullptr && device >= 0; }
};

// Batch-first inputs, as mha/forward_io.h's ForwardInputs (which documents each field).
// Undefined tensors mean "absent". For a session step only query and the masks are used.
struct HostInputs {
  HostTensor query;             // [B, T, E]
  HostTensor key;               // [B, S, kdim]
  HostTensor value;             // [B, S, vdim]
  HostTensor key_padding_mask;  // [B, S]: bool or float
  HostTensor attn_mask;         // [T, S] or [B*H, T, S]: bool or float
  bool is_causal = false;
  bool need_weights = false;
  bool average_attn_weights = true;
  WeightsSelection weights_selection;
  std::optional<ElementType> weights_dtype;  // floating; unset = the output's dtype
  bool head_stats = false;
  HostTensor head_mask;            // [H] or [B, H] floating
  DevicePlace output_place;        // output into CUDA shared memory (copied to OutputTypes)
  DevicePlace attn_weights_place;  // dense attn_weights into CUDA shared memory
  bool wants_head_options() const {
    return weights_selection.any() || weights_dtype || head_stats || head_mask.defined();
  }
};

// The answer, on the host, in the element types asked for: output (and dense weights unless
// weights_dtype) in the request's output dtype, the core casting once.
struct HostOutputs {
  HostTensor output;           // [B, T, E]
  HostTensor attn_weights;     // need_weights (and no top-k)
  HostTensor topk_values;      // weights_selection.top_k > 0
  HostTensor topk_indices;     // int32 or int64
  HostTensor head_entropy;     // head_stats: [B, H, T] float32
  HostTensor head_max_weight;  // head_stats: [B, H, T] float32
};

// The element types an answer is written in.
struct OutputTypes {
  OutputTypes() = default;
  // The types alone, as callers write them (OutputTypes{output, weights}); places set apart.
  OutputTypes(ElementType output_type, std::optional<ElementType> weights_type = std::nullopt)
      : output(output_type), weights(weights_type) {}
  ElementType output = ElementType::kFloat32;
  std::optional<ElementType> weights;  // unset = output
  DevicePlace output_place;            // defined: output written there (DevicePlace)
  DevicePlace attn_weights_place;      // defined: dense attn_weights written there
};

}  // namespace mha
