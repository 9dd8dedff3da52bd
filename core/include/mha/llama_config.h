// The config.json of a Llama-family checkpoint (Llama, Mistral, Qwen2-style grouped-query
// attention with rotary position embeddings), as Hugging Face writes it: the keys the attention of
// every layer needs. The model format, the math and the sizing: docs/afd.md.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "mha/status.h"

namespace mha {

struct LlamaConfig {
  int64_t hidden_size = 0;          // E
  int64_t num_attention_heads = 0;  // H (query heads)
  int64_t num_key_value_heads = 0;  // KV (key/value heads); absent in the file = H
  int64_t head_dim = 0;             // D; absent in the file = E / H
  double rope_theta = 10000.0;      // RoPE base
  int64_t max_position_embeddings = 2048;
  int64_t sliding_window = 0;     // > 0: Mistral's window (positions are capped to it); 0 = none
  int64_t num_hidden_layers = 0;  // L
  bool attention_bias = false;    // q/k/v/o_proj carry a bias

  int64_t q_dim() const { return num_attention_heads * head_dim; }   // H * D
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // KV * D
  // Query heads per K/V head (H / KV): 1 = MHA, H = MQA.
  int64_t group_size() const {
    return num_key_value_heads > 0 ? num_attention_heads / num_key_value_heads : 0;
  }
  // Positions a session may reach: max_position_embeddings, or the sliding window when smaller
  // (within the window, windowed attention equals full causal attention).
  int64_t max_positions() const;
  // K and V of one token of one layer: 2 * KV * D * element_bytes.
  int64_t kv_bytes_per_token(int64_t element_bytes) const { return 2 * kv_dim() * element_bytes; }

  // Every rule, INVALID_ARGUMENT naming the fields and the numbers: sizes >= 1,
  // num_attention_heads a multiple of num_key_value_heads, head_dim even (RoPE rotates halves),
  // rope_theta > 0.
  Status Validate() const;
};

// Reads `path` (NOT_FOUND when it cannot be opened) and checks it: INVALID_ARGUMENT naming the
// file and the key. Required: hidden_size, num_attention_heads, num_hidden_layers. Optional:
// num_key_value_heads, head_dim, rope_theta (or rope_parameters.rope_theta),
// max_position_embeddings, attention_bias, sliding_window (with use_sliding_window). A rope_scaling
// (or a rope_type other than "default") is refused: only the original RoPE is implemented. Other
// keys are ignored.
StatusOr<LlamaConfig> ReadLlamaConfig(const std::string& path);
// The same from a parsed object (ModelConfig::json); `path` names it in errors.
StatusOr<LlamaConfig> LlamaConfigFromJson(const nlohmann::json& json, const std::string& path);
// Whether a config.json object describes a Llama-family stack (has hidden_size,
// num_attention_heads and num_hidden_layers) rather than one nn.MultiheadAttention layer.
bool IsLlamaConfig(const nlohmann::json& json);

}  // namespace mha
