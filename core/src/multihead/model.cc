#include "mha/model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>

#include "attention/packed_attention.h"
#include "attention/panel_gemm.h"
#include "mha/attention_blocks.h"
#include "mha/attention_ops.h"
#include "mha/device_stream.h"
#include "mha/head_selection.h"
#include "mha/runtime.h"
#include "mha/tensor_util.h"
#include "multihead/shape_checks.h"

namespace mha {
namespace {

// Each present mask in parts ([.., .., T, S] views of the inputs), made additive and summed block
// by block (mha/attention_blocks.h); the columns that add_bias_kv / add_zero_attn append are padded
// with zeros, as PyTorch pads attn_mask and key_padding_mask.
MaskParts BuildMaskParts(const ForwardInputs& in, bool include_causal, int64_t batch, int64_t heads,
                         int64_t extra_keys, const at::TensorOptions& opts) {
  const int64_t tgt = in.query.size(1);
  const int64_t src = in.key.defined() ? in.key.size(1) : tgt;
  MaskParts parts;
  parts.options = opts;
  if (in.attn_mask.defined()) {
    const at::Tensor& a = in.attn_mask;
    parts.terms.push_back(a.dim() == 2 ? a.reshape({1, 1, tgt, src})
                                       : a.reshape({batch, heads, tgt, src}));
  }
  if (in.key_padding_mask.defined()) {
    parts.terms.push_back(in.key_padding_mask.reshape({batch, 1, 1, src}));
  }
  if (include_causal) parts.causal_diagonal = 1;  // top-left aligned: triu(ones(T, S), 1)
  if (!parts.empty()) parts.extra_keys = extra_keys;
  return parts;
}

}  // namespace

StatusOr<std::unique_ptr<MhaModel>> MhaModel::Create(const MhaOptions& options,
                                                     MhaWeights weights) {
  MHA_RETURN_IF_ERROR(options.Validate());
  MHA_RETURN_IF_ERROR(CheckWeightShapes(options, weights));
  auto device = ResolveDevice(options.device);
  if (!device.ok()) return device.status();

  std::unique_ptr<MhaModel> model(new MhaModel());
  model->options_ = options;
  model->device_name_ = device->str();
  model->compute_dtype_ = options.dtype;
  try {
    c10::InferenceMode guard;
    model->PlaceWeights(weights, *device, ToScalarType(options.dtype));
    if (options.dtype != DType::kFloat32 && !model->ProbeKernels().ok()) {
      // LibTorch 1.13 on CPU lacks some half-precision kernels (addmm for float16): compute in
      // float32 and cast the outputs back, rather than failing every request.
      spdlog::warn("{} kernels missing on {}: computing in float32, outputs cast to {}",
                   DTypeName(options.dtype), model->device_name_, DTypeName(options.dtype));
      model->compute_dtype_ = DType::kFloat32;
      model->PlaceWeights(weights, *device, at::kFloat);
    }
  } catch (const c10::Error& e) {
    return Internal("placing weights on " + model->device_name_ + ": " +
                    e.what_without_backtrace());
  }
  if (device->is_cuda() && options.cuda_graphs) {
    CudaGraphOptions graphs;
    model->graphs_ = std::make_unique<CudaGraphCache>(graphs);
  }
  return model;
}

void MhaModel::PlaceWeights(const MhaWeights& source, const c10::Device& device,
                            at::ScalarType dtype) {
  auto place = [&](const at::Tensor& t) {
    return t.defined() ? t.to(device, dtype).contiguous() : at::Tensor();
  };
  const MhaWeights& w = source;
  weights_ = MhaWeights{
      place(w.q_weight), place(w.k_weight),   place(w.v_weight), place(w.q_bias), place(w.k_bias),
      place(w.v_bias),   place(w.out_weight), place(w.out_bias), place(w.bias_k), place(w.bias_v)};
  in_proj_weight_ = at::Tensor();
  in_proj_bias_ = at::Tensor();
  if (options_.same_embed_dim()) {
    // One GEMM for q, k and v in self-attention (seeds 001/002); q/k/v become views into it.
    const int64_t e = options_.embed_dim;
    in_proj_weight_ = at::cat({weights_.q_weight, weights_.k_weight, weights_.v_weight}, 0);
    weights_.q_weight = in_proj_weight_.narrow(0, 0, e);
    weights_.k_weight = in_proj_weight_.narrow(0, e, e);
    weights_.v_weight = in_proj_weight_.narrow(0, 2 * e, e);
    if (weights_.q_bias.defined()) {
      in_proj_bias_ = at::cat({weights_.q_bias, weights_.k_bias, weights_.v_bias}, 0);
      weights_.q_bias = in_proj_bias_.narrow(0, 0, e);
      weights_.k_bias = in_proj_bias_.narrow(0, e, e);
      weights_.v_bias = in_proj_bias_.narrow(0, 2 * e, e);
    }
  }
  in_proj_weight_t_ = out_weight_t_ = in_proj_panels_ = out_panels_ = at::Tensor();
  if (device.is_cpu()) {
    if (in_proj_weight_.defined()) in_proj_weight_t_ = in_proj_weight_.t().contiguous();
    out_weight_t_ = weights_.out_weight.t().contiguous();
    // The packed pass's GEMMs read these in place (core/src/attention/panel_gemm.h): +4E^2 floats.
    if (in_proj_weight_t_.defined() && dtype == at::kFloat &&
        options_.embed_dim % internal::kPanelWidth == 0) {
      in_proj_panels_ = internal::PackPanels(in_proj_weight_t_);
      out_panels_ = internal::PackPanels(out_weight_t_);
    }
  }
  compute_scalar_type_ = dtype;
  device_ = device;
  // The copies and the concatenation above were queued on this thread's current (default) stream;
  // passes run on pool streams, which do not wait for it.
  SynchronizeCurrentStream(device);
}

Status MhaModel::ProbeKernels() const {
  ForwardInputs probe;
  probe.query = at::zeros({1, 2, options_.embed_dim});
  if (!options_.same_embed_dim()) {
    probe.key = at::zeros({1, 2, options_.key_dim()});
    probe.value = at::zeros({1, 2, options_.value_dim()});
  }
  ForwardOutputs out;
  for (bool need_weights : {false, true}) {
    probe.need_weights = need_weights;
    MHA_RETURN_IF_ERROR(Forward(probe, &out));
  }
  return Status::Ok();
}

Status MhaModel::ValidateInputs(const ForwardInputs& inputs) const {
  return CheckForwardInputs(options_, inputs);
}

Status MhaModel::Forward(const ForwardInputs& in, ForwardOutputs* out) const {
  MHA_RETURN_IF_ERROR(ValidateInputs(in));
  return ForwardValidated(in, out);
}

Status MhaModel::ForwardValidated(const ForwardInputs& in, ForwardOutputs* out) const {
  try {
    c10::InferenceMode guard;
    if (device_.is_cuda()) {
      RunForwardOnDevice(in, out);
    } else {
      RunForward(in, out);
    }
  } catch (const c10::Error& e) {
    return Internal(std::string("forward pass failed: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(std::string("forward pass failed: ") + e.what());
  }
  return Status::Ok();
}

void MhaModel::RunForwardOnDevice(const ForwardInputs& in, ForwardOutputs* out) const {
  DeviceStreamScope stream(device_);  // this thread's pool stream, current until return
  // Every input on the device first (pinned + non_blocking when big), so that no blocking copy
  // (e.g. of a mask, after the projections were queued) stalls the thread mid-pass; RunForward's
  // own conversions then only cast, on the device.
  ForwardInputs staged = in;
  at::Tensor* const tensors[] = {&staged.query,     &staged.key,
                                 &staged.value,     &staged.key_padding_mask,
                                 &staged.attn_mask, &staged.head_mask};
  // Inputs the caller made on a GPU were queued on its own stream: wait for them there. Their
  // memory needs no record_stream: the caller's stream waits for the pass (CallerWaits below)
  // before it can reuse what the caller frees.
  const bool device_caller = in.query.is_cuda();
  if (std::any_of(std::begin(tensors), std::end(tensors),
                  [](const at::Tensor* t) { return t->defined() && t->is_cuda(); })) {
    stream.WaitForCaller();
  }
  for (at::Tensor* t : tensors) *t = StageToDevice(*t, device_);
  if (!RunGraphed(staged, out)) RunForward(staged, out);
  at::Tensor* const outputs[] = {&out->output,       &out->attn_weights, &out->topk_values,
                                 &out->topk_indices, &out->head_entropy, &out->head_max_weight};
  for (at::Tensor* t : outputs) {
    if (device_caller) {  // device in, device out (library callers, the GPU benchmark)
      stream.HandToCaller(*t);
    } else {                 // host in, host out (the serving path): the encoder reads host memory
      *t = StageToHost(*t);  // only what the selection kept leaves the device
    }
  }
  if (device_caller) {
    stream.CallerWaits();  // queued: the caller's stream orders after the pass, the host goes on
  } else {
    stream.Synchronize();  // outputs complete before they leave this thread and stream
  }
}

bool MhaModel::RunGraphed(const ForwardInputs& in, ForwardOutputs* out) const {
  // Output-only self-attention with no mask but causality: what a graph captures.
  const bool eligible = graphs_ && graphs_->Enabled() && !in.key.defined() && !in.value.defined() &&
                        !in.key_padding_mask.defined() && !in.attn_mask.defined() &&
                        !in.need_weights && !in.wants_head_options();
  if (!eligible) return false;
  const bool causal = in.is_causal;
  at::Tensor output = graphs_->Run(in.query.to(compute_scalar_type_), causal,
                                   [this, causal](const at::Tensor& query) {
                                     ForwardInputs pass;
                                     pass.query = query;
                                     pass.is_causal = causal;
                                     ForwardOutputs result;
                                     RunForward(pass, &result);
                                     return result.output;
                                   });
  if (!output.defined()) return false;
  *out = ForwardOutputs();
  out->output = std::move(output);
  return true;
}

bool MhaModel::ProjectHeads(const ForwardInputs& in, bool explicit_path, at::Tensor* qh,
                            at::Tensor* kh, at::Tensor* vh) const {
  auto to_compute = [&](const at::Tensor& t) { return t.to(device_, compute_scalar_type_); };
  const int64_t batch = in.query.size(0), heads = options_.num_heads, embed = options_.embed_dim;
  const MhaWeights& w = weights_;
  at::Tensor query = to_compute(in.query), q, k, v;
  const bool packed = !in.key.defined() && in_proj_weight_.defined();
  // The explicit path of plain self-attention on CUDA: q (scaled), k, v in heads layout in one
  // pass (docs/gpu_leases.md). Not on the CPU: LibTorch 1.13's CPU kernel made BM_Forward 2x
  // slower.
  if (device_.is_cuda() && packed && explicit_path && !options_.add_bias_kv &&
      !options_.add_zero_attn) {
    QkvHeads qkv = project_qkv_heads(query, in_proj_weight_, in_proj_bias_, heads);
    *qh = std::move(qkv.q_scaled), *kh = std::move(qkv.k), *vh = std::move(qkv.v);
    return true;
  }
  // Projection: one fused GEMM for self-attention, separate GEMMs for cross-attention.
  if (packed) {
    std::vector<at::Tensor> qkv = at::linear(query, in_proj_weight_, in_proj_bias_).chunk(3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    at::Tensor key = in.key.defined() ? to_compute(in.key) : query;
    at::Tensor value = in.value.defined() ? to_compute(in.value) : query;
    q = at::linear(query, w.q_weight, w.q_bias);
    k = at::linear(key, w.k_weight, w.k_bias);
    v = at::linear(value, w.v_weight, w.v_bias);
  }
  if (options_.add_bias_kv) {
    k = at::cat({k, w.bias_k.expand({batch, 1, embed})}, 1);
    v = at::cat({v, w.bias_v.expand({batch, 1, embed})}, 1);
  }
  *qh = split_heads(q, heads), *kh = split_heads(k, heads), *vh = split_heads(v, heads);
  if (options_.add_zero_attn) {
    const auto opts = at::TensorOptions().device(device_).dtype(compute_scalar_type_);
    at::Tensor zeros = at::zeros({batch, heads, 1, options_.head_dim()}, opts);
    *kh = at::cat({*kh, zeros}, 2);
    *vh = at::cat({*vh, zeros}, 2);
  }
  return false;
}

bool MhaModel::RunPacked(const ForwardInputs& in, ForwardOutputs* out) const {
  // Plain self-attention (causal or not, nothing else masked, no key appended, only the output
  // asked) over short sequences in float32 on the CPU: internal::PackedSelfAttention.
  // A query of another width is left to the general path, whose LibTorch ops refuse it (the
  // packed kernels trust E: they would read past the query).
  if (in.query.dim() != 3 || in.query.size(2) != options_.embed_dim) return false;
  const int64_t t = in.query.size(1);
  const bool eligible = device_.is_cpu() && compute_scalar_type_ == at::kFloat &&
                        in_proj_weight_t_.defined() && !in.key.defined() && !in.value.defined() &&
                        !in.attn_mask.defined() && !in.key_padding_mask.defined() &&
                        !in.need_weights && !in.wants_head_options() && !options_.add_bias_kv &&
                        !options_.add_zero_attn && t >= 1 && t <= internal::kPackedAttentionMaxT &&
                        BlockRows(in) >= t;
  if (!eligible) return false;
  // The panel GEMM is one thread's: with more BLAS threads allowed (a lone pass), OpenBLAS's,
  // unless the pass is so small that one thread without packing is faster anyway.
  const bool panels =
      in_proj_panels_.defined() &&
      (BlasThreads() == 1 || in.query.size(0) * t <= internal::kPanelRowsAnyThreads);
  const internal::PackedWeights w{&in_proj_weight_t_,
                                  &in_proj_bias_,
                                  &out_weight_t_,
                                  &weights_.out_bias,
                                  panels ? &in_proj_panels_ : nullptr,
                                  panels ? &out_panels_ : nullptr};
  at::Tensor output =
      internal::PackedSelfAttention(in.query.to(at::kFloat), options_.num_heads, in.is_causal, w);
  *out = ForwardOutputs();
  out->output = output.to(ToScalarType(options_.dtype));
  return true;
}

void MhaModel::RunForward(const ForwardInputs& in, ForwardOutputs* out) const {
  if (RunPacked(in, out)) return;
  const auto opts = at::TensorOptions().device(device_).dtype(compute_scalar_type_);
  const int64_t batch = in.query.size(0), heads = options_.num_heads;
  const MhaWeights& w = weights_;
  // The fused kernel gives no probabilities: head statistics and head_mask need the explicit path.
  // On the CPU, a pass too long for one block of scores runs blocked (mha/attention_blocks.h).
  const bool use_kernel = !in.need_weights && !in.head_stats && !in.head_mask.defined() &&
                          fused_kernel_preferred(device_) &&
                          (device_.is_cuda() || BlockRows(in) >= in.query.size(1));
  at::Tensor qh, kh, vh;
  const bool q_scaled = ProjectHeads(in, !use_kernel, &qh, &kh, &vh);
  const int64_t extra_keys = (options_.add_bias_kv ? 1 : 0) + (options_.add_zero_attn ? 1 : 0);
  const bool has_other_mask = in.attn_mask.defined() || in.key_padding_mask.defined();
  // The fused kernel applies causality itself when it is the only mask and no key was appended.
  const bool kernel_causal = use_kernel && in.is_causal && !has_other_mask && extra_keys == 0;
  const MaskParts mask =
      BuildMaskParts(in, in.is_causal && !kernel_causal, batch, heads, extra_keys, opts);

  at::Tensor per_head;
  if (use_kernel) {
    per_head = fused_attention(qh, kh, vh, mask.Rows(0, qh.size(2), kh.size(2) - extra_keys),
                               kernel_causal);
    *out = ForwardOutputs();
  } else {
    per_head = AttendExplicit(in, qh, kh, vh, mask, q_scaled, out);
  }
  at::Tensor output = at::linear(combine_heads(per_head), w.out_weight, w.out_bias);
  out->output = output.to(ToScalarType(options_.dtype));
}

int64_t MhaModel::BlockRows(const ForwardInputs& in) const {
  const int64_t t = in.query.size(1);
  if (device_.is_cuda()) return t;
  const int64_t keys = (in.key.defined() ? in.key.size(1) : t) + (options_.add_bias_kv ? 1 : 0) +
                       (options_.add_zero_attn ? 1 : 0);
  return AttentionBlockRows(in.query.size(0), options_.num_heads, t, keys,
                            static_cast<int64_t>(c10::elementSize(compute_scalar_type_)),
                            options_.attention_block_bytes);
}

at::Tensor MhaModel::AttendExplicit(const ForwardInputs& in, const at::Tensor& qh,
                                    const at::Tensor& kh, const at::Tensor& vh,
                                    const MaskParts& mask, bool q_scaled,
                                    ForwardOutputs* out) const {
  *out = ForwardOutputs();
  const int64_t batch = qh.size(0), heads = qh.size(1), t = qh.size(2);
  const int64_t block_rows = BlockRows(in);
  const at::ScalarType dtype = in.weights_dtype.value_or(ToScalarType(options_.dtype));
  if (in.head_stats && block_rows < t) {  // filled block by block
    const auto f32 = qh.options().dtype(at::kFloat);
    out->head_entropy = at::empty({batch, heads, t}, f32);
    out->head_max_weight = at::empty({batch, heads, t}, f32);
  }
  // Each block's probabilities [B, H, rows, S']: statistics of each head's softmax distribution
  // (before head_mask), head_mask, then the selected weights; one block keeps the whole pass's
  // tensors as they are (no copy), several write theirs into one buffer each.
  auto each = [&](int64_t begin, at::Tensor probs) {
    const int64_t rows = probs.size(2);
    if (in.head_stats) {
      at::Tensor entropy, max_weight;
      head_statistics(probs, &entropy, &max_weight);
      if (rows == t) {
        out->head_entropy = entropy.to(at::kFloat);
        out->head_max_weight = max_weight.to(at::kFloat);
      } else {
        out->head_entropy.narrow(2, begin, rows).copy_(entropy);
        out->head_max_weight.narrow(2, begin, rows).copy_(max_weight);
      }
    }
    if (in.head_mask.defined()) probs = apply_head_mask(probs, in.head_mask);
    if (in.need_weights && rows == t) {
      SelectWeights(probs, in.weights_selection, in.average_attn_weights, dtype, out);
    } else if (in.need_weights) {
      SelectWeightsRows(probs, begin, t, in.weights_selection, in.average_attn_weights, dtype, out);
    }
    return probs;
  };
  const bool probabilities = in.head_stats || in.head_mask.defined() || in.need_weights;
  return blocked_attention(qh, kh, vh, mask, q_scaled,
                           device_.is_cuda() ? 0 : options_.attention_block_bytes,
                           probabilities ? BlockProbs(each) : BlockProbs());
}

int64_t MhaModel::parameter_count() const {
  int64_t count = 0;
  const MhaWeights& w = weights_;
  for (const at::Tensor* t : {&w.q_weight, &w.k_weight, &w.v_weight, &w.q_bias, &w.k_bias,
                              &w.v_bias, &w.out_weight, &w.out_bias, &w.bias_k, &w.bias_v}) {
    if (t->defined()) count += t->numel();
  }
  return count;
}

}  // namespace mha
