#include "server/serving/kinds/llama/llama_requests.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "mha/text.h"
#include "server/serving/budget.h"
#include "server/serving/limits.h"

namespace mha::serve {
namespace {

std::string Num(int64_t v) { return std::to_string(v); }

Status CheckLayer(const LlamaVersion& e, int64_t layer) {
  const int64_t layers = e.info.num_layers;
  if (layer >= 0 && layer < layers) return Status::Ok();
  return InvalidArgument("layer: " + Num(layer) + " out of range: model '" + e.name + "' has " +
                         Num(layers) + " layers (0 .. " + Num(layers - 1) + ")");
}

// The fields a Llama model's stateless forward refuses, each by name.
Status RefuseUnsupported(const HostInputs& in) {
  const char* field = nullptr;
  if (in.key.defined()) field = "key";
  if (!field && in.value.defined()) field = "value";
  if (!field && in.key_padding_mask.defined()) field = "key_padding_mask";
  if (!field && in.attn_mask.defined()) field = "attn_mask";
  if (!field && in.need_weights) field = "need_weights";
  if (field != nullptr) {
    return InvalidArgument(std::string(field) +
                           ": not available on a Llama model: its attention is causal "
                           "self-attention over query (the layer's hidden states), with no masks "
                           "and no weights returned");
  }
  const WeightsSelection& w = in.weights_selection;
  if (!w.heads.empty()) field = "weights_heads";
  if (!field && w.query_begin) field = "weights_query_begin";
  if (!field && w.query_end) field = "weights_query_end";
  if (!field && w.top_k > 0) field = "weights_top_k";
  if (!field && in.weights_dtype) field = "weights_dtype";
  if (!field && in.head_stats) field = "head_stats";
  if (!field && in.head_mask.defined()) field = "head_mask";
  if (field == nullptr) return Status::Ok();
  return InvalidArgument(std::string(field) +
                         ": head options are not available on a Llama model (docs/heads.md "
                         "applies to one-layer models)");
}

int64_t ComputeBytes(const LlamaModelInfo& l) {
  return static_cast<int64_t>(ElementSize(ToElementType(l.compute_dtype)));
}

// A causal pass of the stack's attention (no weights): blocks on the CPU (the core's default
// budget), the fused kernel with its own causality on a device.
PassShape LlamaPassShape(const LlamaModelInfo& l, int64_t rows, int64_t t, int64_t s) {
  PassShape pass;
  pass.embed_dim = l.hidden_size;
  pass.num_heads = l.num_heads;
  pass.compute_bytes = ComputeBytes(l);
  pass.rows = rows, pass.t = t, pass.s = s;
  pass.on_device = l.device.rfind("cuda", 0) == 0;
  return pass;
}

// The working memory of one layer step over `rows` new rows, its longest entry `t_max` rows over
// at most `keys` cached keys: the projections and outputs of every row, and one entry's attention
// at a time (its gathered K/V heads, its scores and probabilities), as LlamaLayerStep runs them.
int64_t StepWorkBytes(const LlamaVersion& v, int64_t rows, int64_t t_max, int64_t keys) {
  const LlamaModelInfo& l = v.info;
  const double q = static_cast<double>(l.num_heads * l.head_dim);
  const double kv = static_cast<double>(l.num_kv_heads * l.head_dim);
  const double e = static_cast<double>(l.hidden_size);
  const double elements = static_cast<double>(rows) * (2 * q + 2 * kv + e) +
                          2.0 * static_cast<double>(t_max) * static_cast<double>(keys) *
                              static_cast<double>(l.num_heads) +
                          2.0 * static_cast<double>(keys) * kv;
  const double bytes = elements * static_cast<double>(ComputeBytes(l)) +
                       static_cast<double>(keys) * static_cast<double>(v.cache_bytes_per_key);
  return bytes > 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes);
}

Status CheckWork(int64_t work, int64_t response, const RequestLimits& limits,
                 const std::string& what) {
  return CheckPassBytes({work, response}, limits, what, "send fewer tokens");
}

}  // namespace

Status ValidateLlamaForward(const LlamaVersion& e, const InferenceRequest& r,
                            const RequestLimits& limits) {
  const LlamaModelInfo& l = e.info;
  MHA_RETURN_IF_ERROR(CheckLayer(e, r.layer));
  MHA_RETURN_IF_ERROR(RefuseUnsupported(r.inputs));
  const HostTensor& q = r.inputs.query;
  MHA_RETURN_IF_ERROR(CheckLlamaHidden(l, q, 3, "query"));
  const int64_t b = q.size(0), t = q.size(1);
  if (b > limits.max_batch_size) {
    return ResourceExhausted("query: batch size " + Num(b) + " exceeds --max-batch-size " +
                             Num(limits.max_batch_size));
  }
  if (t > limits.max_sequence_length) {
    return ResourceExhausted("query: sequence length " + Num(t) +
                             " exceeds --max-sequence-length " + Num(limits.max_sequence_length));
  }
  if (t > l.max_positions) {
    return InvalidArgument("query: " + Num(t) + " tokens exceed model '" + e.name + "''s " +
                           Num(l.max_positions) + " positions (max_position_embeddings)");
  }
  const DType out = r.output_dtype.value_or(l.dtype);
  const int64_t work = PassWorkBytes(LlamaPassShape(l, b, t, t));
  const int64_t response =
      b * t * l.hidden_size * static_cast<int64_t>(ElementSize(ToElementType(out)));
  return CheckWork(work, response, limits, "query [" + Num(b) + ", " + Num(t) + ", E]");
}

Status CheckLayerStep(const LlamaVersion& e, const LayerStepRequest& r,
                      const RequestLimits& limits) {
  if ((!r.model.empty() && r.model != e.name) ||
      (!r.model_version.empty() && r.model_version != e.version)) {
    return InvalidArgument("model: the sessions are on model '" + e.name + "' version " +
                           e.version + ", the message names '" + Abbreviate(r.model) +
                           "' version '" + Abbreviate(r.model_version) + "'");
  }
  if (r.entries.empty()) return InvalidArgument("entries: a message steps at least one session");
  MHA_RETURN_IF_ERROR(CheckLayer(e, r.layer));
  const LlamaModelInfo& l = e.info;
  std::map<std::string, size_t> seen;
  int64_t rows = 0, t_max = 0, response = 0;
  const int64_t out =
      static_cast<int64_t>(ElementSize(ToElementType(r.output_dtype.value_or(l.dtype))));
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const std::string field = "entries[" + std::to_string(i) + "]";
    const LayerStepEntry& entry = r.entries[i];
    auto [it, fresh] = seen.emplace(entry.session_id, i);
    if (!fresh) {
      return InvalidArgument(field + ".session_id: session '" + Abbreviate(entry.session_id) +
                             "' is also entries[" + std::to_string(it->second) +
                             "]: one entry per session in a message");
    }
    MHA_RETURN_IF_ERROR(CheckLlamaHidden(l, entry.hidden, 2, field + ".hidden"));
    const int64_t t = entry.hidden.size(0);
    if (t > limits.max_sequence_length) {
      return ResourceExhausted(field + ".hidden: " + Num(t) + " new tokens exceed " +
                               "--max-sequence-length " + Num(limits.max_sequence_length));
    }
    rows += t;
    t_max = std::max(t_max, t);
    response += t * l.hidden_size * out;
    if (entry.output_capacity >= 0 && t * l.hidden_size * out > entry.output_capacity) {
      return InvalidArgument(
          field + ".output: shared_memory_byte_size " + Num(entry.output_capacity) +
          " is too small for the output's " + Num(t * l.hidden_size * out) + " bytes (shape [" +
          Num(t) + ", " + Num(l.hidden_size) + "] " +
          ElementTypeName(ToElementType(r.output_dtype.value_or(l.dtype))) + ")");
    }
  }
  const int64_t keys = std::min(l.max_positions, limits.max_sequence_length);
  return CheckWork(StepWorkBytes(e, rows, t_max, keys), response, limits,
                   "layer step of " + Num(static_cast<int64_t>(r.entries.size())) + " entries");
}

}  // namespace mha::serve
