#include "mha/llama_stack.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <spdlog/spdlog.h>

#include "attention/panel_gemm.h"
#include "llama/llama_ops.h"
#include "mha/device_stream.h"
#include "mha/shape_string.h"
#include "mha/tensor_util.h"

namespace mha {
namespace {

at::Tensor Place(const at::Tensor& t, const c10::Device& device, at::ScalarType dtype) {
  return t.defined() ? t.to(device, dtype).contiguous() : at::Tensor();
}

// One layer on `device` in `dtype`: q/k/v concatenated into one weight, it and o_proj's stored
// transposed (internal::LlamaLayer).
internal::LlamaLayer PlaceLayer(const LlamaLayerWeights& w, const c10::Device& device,
                                at::ScalarType dtype) {
  internal::LlamaLayer l;
  l.qkv_weight_t = at::cat({Place(w.q_weight, device, dtype), Place(w.k_weight, device, dtype),
                            Place(w.v_weight, device, dtype)})
                       .t()
                       .contiguous();
  if (w.q_bias.defined()) {
    l.qkv_bias = at::cat({Place(w.q_bias, device, dtype), Place(w.k_bias, device, dtype),
                          Place(w.v_bias, device, dtype)});
  }
  l.o_weight_t = Place(w.o_weight, device, dtype).t().contiguous();
  l.o_bias = Place(w.o_bias, device, dtype);
  return l;
}

}  // namespace

LlamaAttentionStack::~LlamaAttentionStack() = default;

StatusOr<std::shared_ptr<LlamaAttentionStack>> LlamaAttentionStack::Create(
    const LlamaStackOptions& options) {
  auto checkpoint = LoadLlamaCheckpoint(options.path, options.config_path);
  if (!checkpoint.ok()) return checkpoint.status();
  return FromLayers(options, checkpoint->config, checkpoint->layers);
}

StatusOr<std::shared_ptr<LlamaAttentionStack>> LlamaAttentionStack::Create(
    const LlamaStackOptions& options, const LlamaConfig& config, const TensorMap& tensors) {
  auto layers =
      LlamaLayersFromTensors(config, tensors, options.path.empty() ? "tensors" : options.path);
  if (!layers.ok()) return layers.status();
  return FromLayers(options, config, *layers);
}

StatusOr<std::shared_ptr<LlamaAttentionStack>> LlamaAttentionStack::FromLayers(
    const LlamaStackOptions& options, const LlamaConfig& config,
    const std::vector<LlamaLayerWeights>& layers) {
  auto device = ResolveDevice(options.device);
  if (!device.ok()) return device.status();
  std::shared_ptr<LlamaAttentionStack> stack(new LlamaAttentionStack());
  stack->config_ = config;
  stack->device_ = *device;
  stack->device_name_ = device->str();
  stack->dtype_ = stack->compute_dtype_ = options.dtype;
  try {
    c10::InferenceMode guard;
    stack->Place(layers, ToScalarType(options.dtype));
    if (options.dtype != DType::kFloat32 && !stack->ProbeKernels().ok()) {
      spdlog::warn(
          "{} kernels missing on {}: the Llama stack computes in float32, outputs cast to {}",
          DTypeName(options.dtype), stack->device_name_, DTypeName(options.dtype));
      stack->compute_dtype_ = DType::kFloat32;
      stack->Place(layers, at::kFloat);
    }
  } catch (const c10::Error& e) {
    return Internal("placing the Llama stack's weights on " + stack->device_name_ + ": " +
                    e.what_without_backtrace());
  }
  return stack;
}

void LlamaAttentionStack::Place(const std::vector<LlamaLayerWeights>& layers,
                                at::ScalarType dtype) {
  layers_.clear();
  for (const LlamaLayerWeights& w : layers) {
    layers_.push_back(PlaceLayer(w, device_, dtype));
  }
  // The copies were queued on this thread's current stream; a pass on another stream must not
  // read the weights before they land.
  SynchronizeCurrentStream(device_);
}

Status LlamaAttentionStack::ProbeKernels() const {
  at::Tensor out;
  return Forward(0, at::zeros({1, 2, config_.hidden_size}), &out);
}

const internal::LlamaLayer& LlamaAttentionStack::layer(int64_t layer) const {
  return layers_.at(static_cast<size_t>(layer));
}

Status LlamaAttentionStack::Forward(int64_t layer, const at::Tensor& hidden,
                                    at::Tensor* output) const {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgument("layer " + std::to_string(layer) + " out of range: the model has " +
                           std::to_string(num_layers()) + " layers (0 .. " +
                           std::to_string(num_layers() - 1) + ")");
  }
  if (!hidden.defined() || hidden.dim() != 3 || hidden.size(0) < 1 || hidden.size(1) < 1 ||
      hidden.size(2) != config_.hidden_size || !at::isFloatingType(hidden.scalar_type())) {
    return InvalidArgument(
        "hidden: expected floating [B >= 1, T >= 1, " + std::to_string(config_.hidden_size) +
        "] (batch, tokens, hidden_size), got " +
        (hidden.defined()
             ? ShapeString(hidden.sizes()) + " " + std::string(c10::toString(hidden.scalar_type()))
             : std::string("none")));
  }
  try {
    c10::InferenceMode guard;
    *output = RunForward(layer, hidden);
  } catch (const c10::Error& e) {
    return Internal(std::string("Llama forward failed: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(std::string("Llama forward failed: ") + e.what());
  }
  return Status::Ok();
}

at::Tensor LlamaAttentionStack::RunForward(int64_t layer, const at::Tensor& hidden) const {
  const internal::LlamaLayer& w = layers_.at(static_cast<size_t>(layer));
  const LlamaConfig& c = config_;
  const at::ScalarType compute = ToScalarType(compute_dtype_);
  const int64_t b = hidden.size(0), t = hidden.size(1), d = c.head_dim;
  const at::Tensor x = hidden.to(device_, compute).reshape({b * t, c.hidden_size});
  at::Tensor q, k, v;
  internal::ProjectQkv(w, c, x, &q, &k, &v);
  at::Tensor cos, sin;
  internal::RopeTables(at::arange(t, at::TensorOptions().dtype(at::kLong).device(device_)), c,
                       compute, &cos, &sin);
  // [B, T, heads, D] rotated at positions 0 .. T - 1, then split_heads' [B, heads, T, D].
  const at::Tensor qh =
      internal::ApplyRope(q.reshape({b, t, c.num_attention_heads, d}), cos, sin).transpose(1, 2);
  const at::Tensor kh =
      internal::ApplyRope(k.reshape({b, t, c.num_key_value_heads, d}), cos, sin).transpose(1, 2);
  const at::Tensor vh = v.reshape({b, t, c.num_key_value_heads, d}).transpose(1, 2);
  const at::Tensor attended = internal::GroupedAttention(qh, kh, vh, /*causal=*/true);
  const at::Tensor out =
      internal::LinearT(attended.reshape({b * t, c.q_dim()}), w.o_weight_t, w.o_bias)
          .view({b, t, c.hidden_size});
  return out.to(hidden.device(), ToScalarType(dtype_));
}

KvLayout LlamaAttentionStack::kv_layout() const {
  return KvLayout{config_.num_key_value_heads, config_.head_dim, ToScalarType(compute_dtype_),
                  device_};
}

StatusOr<std::shared_ptr<KvBlockPool>> LlamaAttentionStack::CreateKvPool(
    const KvPoolOptions& options) const {
  return KvBlockPool::Create(options, kv_layout());
}

int64_t LlamaAttentionStack::parameter_count() const {
  int64_t count = 0;
  for (const internal::LlamaLayer& l : layers_) {
    for (const at::Tensor* t : {&l.qkv_weight_t, &l.qkv_bias, &l.o_weight_t, &l.o_bias}) {
      if (t->defined()) count += t->numel();
    }
  }
  return count;
}

}  // namespace mha
