// The torch-free face of the core's Llama-family stacks (docs/afd.md), as mha/engine.h is for the
// one-layer models: load a checkpoint folder, describe it, a stateless forward of one layer, the
// session caches (mha/llama_session_cache.h) and one layer's batched step over several sessions,
// all on host tensors (mha/host_tensor.h). No LibTorch in this header; the core implements it with
// the tensor adapter (mha/tensor_adapter.h), the one place host tensors become ATen and back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mha/host_tensor.h"
#include "mha/kv_cache.h"
#include "mha/llama_session_cache.h"
#include "mha/options.h"
#include "mha/status.h"

namespace mha {

class LlamaAttentionStack;  // mha/llama_stack.h

// What callers outside the core read about a loaded stack.
struct LlamaModelInfo {
  int64_t num_layers = 0;         // L
  int64_t hidden_size = 0;        // E
  int64_t num_heads = 0;          // H (query heads)
  int64_t num_kv_heads = 0;       // KV (key/value heads)
  int64_t head_dim = 0;           // D
  int64_t max_positions = 0;      // positions a session may reach (LlamaConfig::max_positions)
  double rope_theta = 0;          //
  bool attention_bias = false;    //
  std::string device;             // resolved: "cpu", "cuda:0"
  DType dtype = DType::kFloat32;  // of the outputs
  DType compute_dtype = DType::kFloat32;  // of the math and the KV cache
  int64_t parameter_count = 0;
  // K and V of one token of one layer in the cache: 2 * KV * D * compute dtype size.
  int64_t kv_bytes_per_token = 0;
};
LlamaModelInfo DescribeLlamaModel(const LlamaAttentionStack& stack);

struct LlamaLoadOptions {
  std::string path;         // a checkpoint folder (mha/llama_weights.h LoadLlamaCheckpoint)
  std::string config_path;  // "" = the folder's config.json
  DType dtype = DType::kFloat32;
  std::string device = "auto";  // "cpu", "cuda", "cuda:N" or "auto" (CUDA when present)
};

struct LoadedLlamaModel {
  std::shared_ptr<const LlamaAttentionStack> stack;
  LlamaModelInfo info;
};
// LlamaAttentionStack::Create; errors name the file, the tensor and the shapes.
StatusOr<LoadedLlamaModel> LoadLlamaModel(const LlamaLoadOptions& options);
// The files a checkpoint folder's load reads: model.safetensors, or model.safetensors.index.json
// and the shards holding attention tensors (config.json aside). NOT_FOUND when it has neither.
StatusOr<std::vector<std::string>> LlamaCheckpointFiles(const std::string& folder);

// `hidden` is floating with `rank` dimensions, the last one E and every other >= 1 ([B, T, E] for
// a stateless forward, [t, E] for a session's step): INVALID_ARGUMENT naming `field`, the
// expected and the actual shape and type otherwise.
Status CheckLlamaHidden(const LlamaModelInfo& info, const HostTensor& hidden, int64_t rank,
                        const std::string& field);

// Stateless causal forward of `layer` over hidden [B, T, E] at positions 0 .. T - 1, answered on
// the host as [B, T, E] in `output` (cast once). INVALID_ARGUMENT for a layer out of range or
// another shape; LibTorch errors as INTERNAL.
StatusOr<HostTensor> LlamaForward(const LlamaAttentionStack& stack, int64_t layer,
                                  const HostTensor& hidden, ElementType output);

// A block pool for the stack's sessions (every layer of every session draws from it): blocks of
// options.block_tokens tokens of one layer, KV heads only (kv_bytes_per_token each token).
StatusOr<std::shared_ptr<KvBlockPool>> CreateLlamaKvPool(const LlamaAttentionStack& stack,
                                                         const KvPoolOptions& options);
// A session of the stack over `pool` (one cache per layer); max_tokens 0 = the pool's bound.
StatusOr<std::unique_ptr<LlamaSessionCache>> CreateLlamaSession(const LlamaAttentionStack& stack,
                                                                std::shared_ptr<KvBlockPool> pool,
                                                                int64_t max_tokens);

// One entry of a layer step: a session, its hidden states [t, E] at the step's layer, the element
// type its output is answered in.
struct LlamaHostEntry {
  LlamaSessionCache* session = nullptr;
  HostTensor hidden;
  ElementType output = ElementType::kFloat32;
};

// One pass of `layer` over every entry (mha/llama_session.h StepSessions: checked, prepared, one
// LlamaLayerStep); the outputs [t, E] on the host in entry order. On any error no cache has grown
// (every cache is back at its length; blocks reserved for the step stay with their sessions):
// INVALID_ARGUMENT / OUT_OF_RANGE / FAILED_PRECONDITION / RESOURCE_EXHAUSTED prefixed with
// "entry i: ", LibTorch errors as INTERNAL.
StatusOr<std::vector<HostTensor>> StepLlamaSessions(const LlamaAttentionStack& stack, int64_t layer,
                                                    const std::vector<LlamaHostEntry>& entries);

}  // namespace mha
