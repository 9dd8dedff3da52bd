// One multi-head-attention layer ready to run: weights on their device and dtype, forward pass
// equal to torch.nn.MultiheadAttention(batch_first=True) in eval mode.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "mha/cuda_graphs.h"
#include "mha/forward_io.h"
#include "mha/options.h"
#include "mha/status.h"
#include "mha/weights.h"

namespace mha {

struct MaskParts;  // mha/attention_blocks.h

class MhaModel {
 public:
  // Checks options against the weights' shapes, resolves the device, casts the weights to the
  // device and dtype once. Any mismatch is INVALID_ARGUMENT naming the tensor and both shapes.
  static StatusOr<std::unique_ptr<MhaModel>> Create(const MhaOptions& options, MhaWeights weights);

  // Validates shapes and dtypes (INVALID_ARGUMENT naming the field, expected and actual), moves
  // inputs to the model's device and compute dtype, and runs the forward pass under
  // c10::InferenceMode. LibTorch errors come back as INTERNAL, never as exceptions. On a CUDA
  // device the pass runs on the calling thread's own pool stream, inputs are staged through pinned
  // memory and host queries get host outputs, complete on return (mha/device_stream.h). A query
  // already on the device (a library caller's) gets device outputs *queued*, as an ATen op's are:
  // the caller's current stream waits for the pass through an event, and nothing blocks the host
  // (read them on that stream, or synchronize it). Thread-safe, so several threads (instances) may
  // run passes of one model at once.
  Status Forward(const ForwardInputs& inputs, ForwardOutputs* outputs) const;

  // Shape/dtype checks only; Forward calls it first. Exposed for callers that validate early.
  Status ValidateInputs(const ForwardInputs& inputs) const;

  // Forward for inputs that passed ValidateInputs already (the serving layer validates each
  // request once, at its edge, and merged batches are valid by construction). Inputs that did not
  // pass it are a caller bug: LibTorch's error then comes back as INTERNAL.
  Status ForwardValidated(const ForwardInputs& inputs, ForwardOutputs* outputs) const;

  const MhaOptions& options() const { return options_; }
  const std::string& device() const { return device_name_; }  // resolved, e.g. "cpu", "cuda:0"
  // The dtype the math runs in: options().dtype, or float32 where the device lacks kernels for it.
  DType compute_dtype() const { return compute_dtype_; }
  int64_t parameter_count() const;
  // CUDA graphs captured so far (mha/cuda_graphs.h); 0 on the CPU or with options().cuda_graphs
  // off.
  int64_t cuda_graphs_captured() const { return graphs_ ? graphs_->size() : 0; }
  // The model's graph cache; null on the CPU or with options().cuda_graphs off.
  const CudaGraphCache* cuda_graph_cache() const { return graphs_.get(); }
  const MhaWeights& weights() const { return weights_; }
  // The fused q/k/v in-projection [3E, E] and its bias [3E] (q_weight, k_weight and v_weight are
  // row views of it); undefined unless kdim == vdim == E (the bias also when bias=False).
  const at::Tensor& in_proj_weight() const { return in_proj_weight_; }
  const at::Tensor& in_proj_bias() const { return in_proj_bias_; }
  // On the CPU, the decode step's weights laid out once at load as its GEMMs read them
  // (DecodeSteps, mha/decode.h): in_proj_weight() transposed, [E, 3E] contiguous (undefined with
  // it), and out_weight transposed, [E, E]. OpenBLAS packs x times a contiguous [in, out] matrix
  // faster than x times [out, in]^T, and then one GEMM for q, k and v is the fastest even for one
  // row (docs/llama_roofline.md). Undefined on a GPU.
  const at::Tensor& in_proj_weight_t() const { return in_proj_weight_t_; }
  const at::Tensor& out_weight_t() const { return out_weight_t_; }
  // The same two as panels (core/src/attention/panel_gemm.h), which a GEMM reads in place with
  // nothing packed per call: CPU, float32 and E a multiple of 16 only, else undefined.
  const at::Tensor& in_proj_panels() const { return in_proj_panels_; }
  const at::Tensor& out_panels() const { return out_panels_; }

 private:
  MhaModel() = default;
  void PlaceWeights(const MhaWeights& source, const c10::Device& device, at::ScalarType dtype);
  Status ProbeKernels() const;  // one tiny forward per path in the compute dtype
  void RunForward(const ForwardInputs& inputs, ForwardOutputs* outputs) const;  // may throw
  // The CPU pass of plain short self-attention over the transposed weights
  // (core/src/attention/packed_attention.h); false, having done nothing, when the pass is not one.
  bool RunPacked(const ForwardInputs& inputs, ForwardOutputs* outputs) const;  // may throw
  // Probabilities, head statistics, head_mask, the per-head output [B, H, T, D] and the selected
  // weights (mha/head_selection.h) into `outputs`; may throw.
  // `q_scaled`: qh already carries 1/sqrt(D) (mha::project_qkv_heads).
  // Blocks of BlockRows query rows (mha/attention_blocks.h); the weights land in one buffer.
  at::Tensor AttendExplicit(const ForwardInputs& inputs, const at::Tensor& qh, const at::Tensor& kh,
                            const at::Tensor& vh, const MaskParts& mask, bool q_scaled,
                            ForwardOutputs* outputs) const;
  // Query rows per block of scores: AttentionBlockRows on the CPU, T (one block) on CUDA.
  int64_t BlockRows(const ForwardInputs& inputs) const;
  // q, k, v in heads layout [B, H, T or S, D] for RunForward; true when qh is already scaled.
  bool ProjectHeads(const ForwardInputs& inputs, bool explicit_path, at::Tensor* qh, at::Tensor* kh,
                    at::Tensor* vh) const;
  // CUDA only: RunForward on this thread's stream with staged inputs (mha/device_stream.h).
  void RunForwardOnDevice(const ForwardInputs& inputs, ForwardOutputs* outputs) const;
  // CUDA only: the pass from a captured graph when it is eligible (mha/cuda_graphs.h); false when
  // it must run eagerly.
  bool RunGraphed(const ForwardInputs& staged, ForwardOutputs* outputs) const;

  MhaOptions options_;
  MhaWeights weights_;
  at::Tensor in_proj_weight_;  // [3E, E] fused q/k/v for self-attention (same_embed_dim only)
  at::Tensor in_proj_bias_;    // [3E] or undefined
  at::Tensor in_proj_weight_t_, out_weight_t_;  // CPU only: [E, 3E], [E, E]
  // CPU, float32, E a multiple of 16 only: the same as panels (core/src/attention/panel_gemm.h).
  at::Tensor in_proj_panels_, out_panels_;
  std::string device_name_;
  c10::Device device_{c10::kCPU};
  DType compute_dtype_ = DType::kFloat32;
  at::ScalarType compute_scalar_type_ = at::kFloat;
  std::unique_ptr<CudaGraphCache> graphs_;  // CUDA device with options_.cuda_graphs only
};

}  // namespace mha
