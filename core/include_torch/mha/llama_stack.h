// The attention of every layer of a Llama-family checkpoint (grouped-query attention with rotary
// position embeddings; the attention side of attention-FFN disaggregation, docs/afd.md), placed
// on one device in one dtype. Stateless forward of any one layer here; steps over per-layer KV
// caches in mha/llama_step.h, a session's caches in mha/llama_session.h.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "mha/kv_cache.h"
#include "mha/kv_layout.h"
#include "mha/llama_config.h"
#include "mha/llama_weights.h"
#include "mha/options.h"
#include "mha/status.h"

namespace mha {

namespace internal {
struct LlamaLayer;
}

struct LlamaStackOptions {
  // A checkpoint folder (config.json + model.safetensors, or model.safetensors.index.json and its
  // shards) or one .safetensors file with config.json beside it (LoadLlamaCheckpoint).
  std::string path;
  std::string config_path;  // "" = the checkpoint's config.json
  DType dtype = DType::kFloat32;
  std::string device = "auto";  // "cpu", "cuda", "cuda:N" or "auto" (CUDA when present)
};

class LlamaAttentionStack {
 public:
  // Loads options.path (mha/llama_weights.h) and places every layer on the device in the dtype,
  // once. Errors: those of LoadLlamaCheckpoint, FAILED_PRECONDITION for a missing CUDA device.
  static StatusOr<std::shared_ptr<LlamaAttentionStack>> Create(const LlamaStackOptions& options);
  // The same from a config and tensors already in memory (options.path and config_path unused).
  static StatusOr<std::shared_ptr<LlamaAttentionStack>> Create(const LlamaStackOptions& options,
                                                               const LlamaConfig& config,
                                                               const TensorMap& tensors);
  ~LlamaAttentionStack();

  // Stateless causal forward of `layer` over hidden [B, T, E] at positions 0 .. T - 1: output
  // [B, T, E] in dtype(), on hidden's device. INVALID_ARGUMENT naming the field and the numbers
  // for a layer out of range or another shape; LibTorch errors come back as INTERNAL.
  Status Forward(int64_t layer, const at::Tensor& hidden, at::Tensor* output) const;

  // What one token of one layer's KV cache holds: KV heads of head_dim in compute_dtype() on the
  // stack's device; bytes per token per layer = 2 * KV * D * dtype size.
  KvLayout kv_layout() const;
  // A block pool for this stack's sessions (every layer of every session draws from it).
  StatusOr<std::shared_ptr<KvBlockPool>> CreateKvPool(const KvPoolOptions& options) const;

  const LlamaConfig& config() const { return config_; }
  int64_t num_layers() const { return config_.num_hidden_layers; }
  const std::string& device() const { return device_name_; }  // resolved: "cpu", "cuda:0"
  DType dtype() const { return dtype_; }                      // of the outputs
  // The dtype of the math and of the KV cache: dtype(), or float32 where the device lacks
  // half-precision kernels (LibTorch 1.13's CPU float16), as MhaModel does.
  DType compute_dtype() const { return compute_dtype_; }
  int64_t parameter_count() const;
  // Layer `layer` placed for computing (internal: llama_ops.h); `layer` must be in range.
  const internal::LlamaLayer& layer(int64_t layer) const;

 private:
  LlamaAttentionStack() = default;
  static StatusOr<std::shared_ptr<LlamaAttentionStack>> FromLayers(
      const LlamaStackOptions& options, const LlamaConfig& config,
      const std::vector<LlamaLayerWeights>& layers);
  void Place(const std::vector<LlamaLayerWeights>& layers, at::ScalarType dtype);
  Status ProbeKernels() const;  // one tiny forward of layer 0 in the compute dtype
  at::Tensor RunForward(int64_t layer, const at::Tensor& hidden) const;  // may throw

  LlamaConfig config_;
  std::vector<internal::LlamaLayer> layers_;
  std::string device_name_;
  c10::Device device_{c10::kCPU};
  DType dtype_ = DType::kFloat32;
  DType compute_dtype_ = DType::kFloat32;
};

}  // namespace mha
