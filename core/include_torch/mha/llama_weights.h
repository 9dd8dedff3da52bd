// The attention weights of a Llama-family checkpoint (Hugging Face's safetensors layout): for
// every layer i, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (and .bias with
// attention_bias). The checkpoint's other tensors (MLP, norms, embeddings) are not read.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mha/llama_config.h"
#include "mha/status.h"
#include "mha/weights.h"

namespace mha {

// One layer's projections as torch.nn.Linear stores them ([out_features, in_features]).
struct LlamaLayerWeights {
  at::Tensor q_weight;                // [H * D, E]
  at::Tensor k_weight;                // [KV * D, E]
  at::Tensor v_weight;                // [KV * D, E]
  at::Tensor o_weight;                // [E, H * D]
  at::Tensor q_bias, k_bias, v_bias;  // [H * D], [KV * D], [KV * D]: attention_bias only
  at::Tensor o_bias;                  // [E]: attention_bias only
};

// "model.layers.{layer}.self_attn.{proj}.{kind}", e.g. LlamaTensorName(3, "k_proj", "weight").
std::string LlamaTensorName(int64_t layer, const char* proj, const char* kind);
// Whether `name` is one of the attention tensors a Llama checkpoint's loader reads.
bool IsLlamaAttentionTensor(const std::string& name);

// Every layer's attention out of `tensors` (other names are ignored), checked against `config`:
// INVALID_ARGUMENT naming `source`, the tensor and both shapes for a missing or misshaped tensor,
// a non-floating one, a bias that attention_bias does not announce, or a layer beyond
// num_hidden_layers. Tensors stay as stored (dtype, CPU).
StatusOr<std::vector<LlamaLayerWeights>> LlamaLayersFromTensors(const LlamaConfig& config,
                                                                const TensorMap& tensors,
                                                                const std::string& source);

struct LlamaCheckpoint {
  LlamaConfig config;
  std::vector<LlamaLayerWeights> layers;  // num_hidden_layers of them, as stored, on the CPU
  std::string config_path;
  std::vector<std::string> files;  // the safetensors files read
};

// Reads a checkpoint: `path` is a folder holding config.json and model.safetensors, or a sharded
// model.safetensors.index.json ({"weight_map": {tensor: file}}) and its shards; or one
// .safetensors file with config.json beside it. `config_path` ("" = that config.json) overrides.
// Only the attention tensors are read. NOT_FOUND for missing files; INVALID_ARGUMENT as above.
StatusOr<LlamaCheckpoint> LoadLlamaCheckpoint(const std::string& path,
                                              const std::string& config_path = "");

}  // namespace mha
