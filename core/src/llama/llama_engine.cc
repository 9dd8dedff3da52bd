// mha/llama_engine.h: the torch-free face of the Llama stacks, over LlamaAttentionStack, the
// session caches and StepSessions, through the tensor adapter.
#include "mha/llama_engine.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <exception>
#include <utility>

#include "device/guarded.h"
#include "mha/llama_session.h"
#include "mha/llama_stack.h"
#include "mha/shape_string.h"
#include "mha/tensor_adapter.h"

namespace mha {

LlamaModelInfo DescribeLlamaModel(const LlamaAttentionStack& stack) {
  const LlamaConfig& c = stack.config();
  LlamaModelInfo info;
  info.num_layers = c.num_hidden_layers;
  info.hidden_size = c.hidden_size;
  info.num_heads = c.num_attention_heads;
  info.num_kv_heads = c.num_key_value_heads;
  info.head_dim = c.head_dim;
  info.max_positions = c.max_positions();
  info.rope_theta = c.rope_theta;
  info.attention_bias = c.attention_bias;
  info.device = stack.device();
  info.dtype = stack.dtype();
  info.compute_dtype = stack.compute_dtype();
  info.parameter_count = stack.parameter_count();
  info.kv_bytes_per_token =
      c.kv_bytes_per_token(static_cast<int64_t>(ElementSize(ToElementType(stack.compute_dtype()))));
  return info;
}

StatusOr<LoadedLlamaModel> LoadLlamaModel(const LlamaLoadOptions& options) {
  StatusOr<LoadedLlamaModel> result = Internal("LoadLlamaModel: not run");
  const Status status = Guarded("loading the Llama checkpoint", [&] {
    LlamaStackOptions o;
    o.path = options.path;
    o.config_path = options.config_path;
    o.dtype = options.dtype;
    o.device = options.device;
    auto stack = LlamaAttentionStack::Create(o);
    if (!stack.ok()) return stack.status();
    LoadedLlamaModel loaded;
    loaded.info = DescribeLlamaModel(**stack);
    loaded.stack = std::move(stack.value());
    result = std::move(loaded);
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return result;
}

Status CheckLlamaHidden(const LlamaModelInfo& info, const HostTensor& hidden, int64_t rank,
                        const std::string& field) {
  bool ok = hidden.defined() && hidden.dim() == rank && IsFloating(hidden.dtype()) &&
            hidden.size(-1) == info.hidden_size;
  for (int64_t d = 0; ok && d + 1 < rank; ++d) ok = hidden.size(d) >= 1;
  if (ok) return Status::Ok();
  const std::string want =
      rank == 3 ? "[B >= 1, T >= 1, " + std::to_string(info.hidden_size) +
                      "] (batch, tokens, hidden_size)"
                : "[t >= 1, " + std::to_string(info.hidden_size) + "] (new tokens, hidden_size)";
  const std::string got = hidden.defined() ? ShapeString(hidden.shape()) + " " +
                                                 std::string(ElementTypeName(hidden.dtype()))
                                           : std::string("none");
  return InvalidArgument(field + ": expected floating " + want + ", got " + got);
}

StatusOr<HostTensor> LlamaForward(const LlamaAttentionStack& stack, int64_t layer,
                                  const HostTensor& hidden, ElementType output) {
  HostTensor host;
  const Status status = Guarded("the Llama forward pass", [&] {
    at::Tensor out;
    MHA_RETURN_IF_ERROR(stack.Forward(layer, ToTensor(hidden), &out));
    host = ToHost(out, output);
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return host;
}

StatusOr<std::shared_ptr<KvBlockPool>> CreateLlamaKvPool(const LlamaAttentionStack& stack,
                                                         const KvPoolOptions& options) {
  StatusOr<std::shared_ptr<KvBlockPool>> result = Internal("CreateLlamaKvPool: not run");
  const Status status = Guarded("allocating the KV cache pool", [&] {
    auto pool = stack.CreateKvPool(options);
    if (!pool.ok()) return pool.status();
    result = std::move(pool.value());
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return result;
}

StatusOr<std::unique_ptr<LlamaSessionCache>> CreateLlamaSession(const LlamaAttentionStack& stack,
                                                                std::shared_ptr<KvBlockPool> pool,
                                                                int64_t max_tokens) {
  return LlamaSessionCache::Create({std::move(pool), stack.num_layers(), max_tokens});
}

StatusOr<std::vector<HostTensor>> StepLlamaSessions(const LlamaAttentionStack& stack, int64_t layer,
                                                    const std::vector<LlamaHostEntry>& entries) {
  if (layer < 0 || layer >= stack.num_layers()) {
    return InvalidArgument("layer " + std::to_string(layer) + " out of range: the model has " +
                           std::to_string(stack.num_layers()) + " layers (0 .. " +
                           std::to_string(stack.num_layers() - 1) + ")");
  }
  std::vector<int64_t> lengths;  // each entry's layer length before the step, to roll back
  for (const LlamaHostEntry& e : entries) {
    const bool usable = e.session != nullptr && e.session->num_layers() == stack.num_layers();
    lengths.push_back(usable ? e.session->length(layer) : -1);
  }
  std::vector<HostTensor> outputs;
  const Status status = Guarded("the Llama layer step", [&] {
    std::vector<at::Tensor> outs(entries.size());
    std::vector<LlamaSessionStep> steps;
    steps.reserve(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      steps.push_back(LlamaSessionStep{entries[i].session, ToTensor(entries[i].hidden), &outs[i]});
    }
    MHA_RETURN_IF_ERROR(StepSessions(stack, layer, steps));
    for (size_t i = 0; i < entries.size(); ++i) {
      outputs.push_back(ToHost(outs[i], entries[i].output));  // may throw: rolled back below
    }
    return Status::Ok();
  });
  if (status.ok()) return outputs;
  if (status.code() == StatusCode::kInternal) {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (lengths[i] >= 0) entries[i].session->layer(layer)->RollbackTo(lengths[i]);
    }
  }
  return status;
}

}  // namespace mha
