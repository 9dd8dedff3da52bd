#include "server/serving/kinds/multihead/pass_cost.h"

#include <initializer_list>
#include <limits>

#include "server/serving/limits.h"

namespace mha::serve {
namespace {

const auto Mul = &SaturatingMul;
const auto Add = &SaturatingAdd;

int64_t Bytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

int64_t ExtraKeys(const MhaOptions& o) {
  return (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
}

}  // namespace

PassShape ModelPassShape(const ModelInfo& model, int64_t rows, int64_t t, int64_t s) {
  PassShape pass;
  pass.embed_dim = model.options.embed_dim;
  pass.num_heads = model.options.num_heads;
  pass.extra_keys = ExtraKeys(model.options);
  pass.compute_bytes = Bytes(model.compute_dtype);
  pass.rows = rows, pass.t = t, pass.s = s;
  pass.on_device = model.device.rfind("cuda", 0) == 0;
  pass.block_bytes = model.options.attention_block_bytes;
  return pass;
}

namespace {

// The bytes of the weights a request gets back (selection applied) and of what produces them.
struct WeightsCost {
  int64_t response = 0;  // encoded
  int64_t work = 0;      // the selected copy in the compute dtype, head_mask's scaled copy
};

// `block_rows`: the query rows whose probabilities are alive at a time (T on a device).
WeightsCost EstimateWeightsCost(const MhaOptions& o, int64_t compute, int64_t out,
                                const HostInputs& in, int64_t block_rows) {
  const int64_t b = in.query.size(0), t = in.query.size(1);
  const int64_t s = in.key.defined() ? in.key.size(1) : t, keys = Add(s, ExtraKeys(o));
  WeightsCost cost;
  if (in.head_mask.defined()) cost.work = Mul({b, o.num_heads, block_rows, keys, compute});
  if (in.head_stats) {  // [B, H, T] twice as float32, and one head's [B, T, S'] temporary
    cost.response = Mul({2, b, o.num_heads, t, 4});
    cost.work = Add(cost.work, Add(cost.response, Mul({b, block_rows, keys, compute})));
  }
  if (!in.need_weights) return cost;
  const SelectedShape shape =
      SelectedWeightsShape(in.weights_selection, in.average_attn_weights, b, t, o.num_heads, keys);
  const int64_t values =
      Mul({shape.batch, shape.heads > 0 ? shape.heads : 1, shape.rows, shape.columns});
  const int64_t value_bytes =
      in.weights_dtype ? static_cast<int64_t>(ElementSize(*in.weights_dtype)) : out;
  int64_t bytes = Mul({values, value_bytes});
  if (in.weights_selection.top_k > 0) {
    bytes = Add(bytes, Mul({values, in.weights_selection.topk_indices_int64 ? 8 : 4}));
  }
  cost.response = Add(cost.response, bytes);
  cost.work = Add(cost.work, Mul({values, compute}));
  return cost;
}

}  // namespace

PassCost EstimatePassCost(const ModelInfo& model, DType output, const HostInputs& in) {
  const MhaOptions& o = model.options;
  const int64_t b = in.query.size(0), t = in.query.size(1);
  const int64_t s = in.key.defined() ? in.key.size(1) : t;
  PassShape pass = ModelPassShape(model, b, t, s);
  pass.head_options = in.need_weights || in.head_stats || in.head_mask.defined();
  const bool masks = in.attn_mask.defined() || in.key_padding_mask.defined();
  const bool causal_alone = in.is_causal && !masks && pass.extra_keys == 0;  // the kernel's own
  if (in.attn_mask.defined() && in.attn_mask.dim() == 3) {
    pass.mask_heads = o.num_heads;
  } else if (masks || (in.is_causal && !causal_alone)) {
    pass.mask_heads = 1;
  }
  const int64_t block_rows = pass.on_device
                                 ? t
                                 : AttentionBlockRows(b, o.num_heads, t, Add(s, pass.extra_keys),
                                                      pass.compute_bytes, pass.block_bytes);
  const WeightsCost weights =
      EstimateWeightsCost(o, pass.compute_bytes, Bytes(output), in, block_rows);
  PassCost cost;
  cost.response_bytes = Add(Mul({b, t, o.embed_dim, Bytes(output)}), weights.response);
  // The pass (its weights counted below, as what the selection keeps), what the selection copies,
  // and the encoded response built beside the tensors it copies.
  cost.work_bytes = Add(PassWorkBytes(pass), Add(weights.work, Mul({2, cost.response_bytes})));
  return cost;
}

Status CheckPassCost(const PassCost& cost, const HostInputs& in, int64_t max_response_bytes,
                     int64_t max_work_bytes) {
  RequestLimits limits;
  limits.max_response_bytes = max_response_bytes;
  limits.max_work_bytes = max_work_bytes;
  std::string how = "use a smaller batch (B) or shorter sequences (T, S)";
  if (in.need_weights) {
    how = in.average_attn_weights
              ? "ask without need_weights, or " + how
              : "ask for averaged weights (average_attn_weights=true) or none, or " + how;
    how =
        "select fewer weights (weights_top_k, weights_heads, weights_query_begin/end, or "
        "head_stats alone), " +
        how;
  }
  return CheckPassBytes({cost.work_bytes, cost.response_bytes}, limits, "", how);
}

}  // namespace mha::serve
