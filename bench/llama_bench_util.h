// What the Llama benchmarks share (llama_step_bench.cc, llama_trace.cc): one layer's random
// weights, whose values do not change what a step costs.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "mha/llama_config.h"
#include "mha/llama_weights.h"

namespace mha_bench {

// Layer 0's q/k/v/o_proj weights of `c` (no biases), N(0, scale²), seeded.
inline mha::TensorMap RandomLlamaLayer(const mha::LlamaConfig& c, double scale) {
  at::manual_seed(0);
  mha::TensorMap tensors;
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    const bool kv = proj[0] == 'k' || proj[0] == 'v';
    const int64_t rows = proj[0] == 'o' ? c.hidden_size : kv ? c.kv_dim() : c.q_dim();
    const int64_t cols = proj[0] == 'o' ? c.q_dim() : c.hidden_size;
    tensors[mha::LlamaTensorName(0, proj, "weight")] = at::randn({rows, cols}) * scale;
  }
  return tensors;
}

}  // namespace mha_bench
