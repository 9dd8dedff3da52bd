#include "server/serving/budget.h"

#include <limits>

namespace mha::serve {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Saturating product of non-negative factors.
int64_t Mul(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return kMax;
  }
  return product;
}

int64_t Add(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? kMax : sum;
}

int64_t Bytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

int64_t ExtraKeys(const MhaOptions& o) {
  return (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
}

}  // namespace

int64_t PassWorkBytes(int64_t embed_dim, int64_t num_heads, int64_t extra_keys, int64_t c,
                      int64_t rows, int64_t t, int64_t s, bool need_weights) {
  // Projections q, k, v and their head-split copies, the attention output and W^O's output.
  const int64_t projections = Mul({rows, Add(Mul({3, t}), Mul({4, s})), embed_dim, c});
  // Scores, the additive mask and the softmax probabilities: B*H*T*S' each; weights add a copy.
  const int64_t scores = Mul({rows, num_heads, t, Add(s, extra_keys), c, need_weights ? 4 : 3});
  return Add(projections, scores);
}

namespace {

// The bytes of the weights a request gets back (selection applied) and of what produces them.
struct WeightsCost {
  int64_t response = 0;  // encoded
  int64_t work = 0;      // the selected copy in the compute dtype, head_mask's scaled copy
};

WeightsCost EstimateWeightsCost(const MhaOptions& o, int64_t compute, int64_t out,
                                const HostInputs& in) {
  const int64_t b = in.query.size(0), t = in.query.size(1);
  const int64_t s = in.key.defined() ? in.key.size(1) : t, keys = Add(s, ExtraKeys(o));
  WeightsCost cost;
  if (in.head_mask.defined()) cost.work = Mul({b, o.num_heads, t, keys, compute});
  if (in.head_stats) {  // [B, H, T] twice as float32, and one head's [B, T, S'] temporary
    cost.response = Mul({2, b, o.num_heads, t, 4});
    cost.work = Add(cost.work, Add(cost.response, Mul({b, t, keys, compute})));
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

PassCost EstimatePassCost(const MhaOptions& o, DType compute, DType output, const HostInputs& in) {
  const int64_t b = in.query.size(0), t = in.query.size(1);
  const int64_t s = in.key.defined() ? in.key.size(1) : t;
  PassCost cost;
  cost.response_bytes = Mul({b, t, o.embed_dim, Bytes(output)});
  const WeightsCost weights = EstimateWeightsCost(o, Bytes(compute), Bytes(output), in);
  cost.response_bytes = Add(cost.response_bytes, weights.response);
  // Scores, mask and probabilities (PassWorkBytes without weights), what the selection copies,
  // and the encoded response built beside the tensors it copies.
  cost.work_bytes = Add(PassWorkBytes(o.embed_dim, o.num_heads, ExtraKeys(o), Bytes(compute), b, t,
                                      s, /*need_weights=*/false),
                        Add(weights.work, Mul({2, cost.response_bytes})));
  return cost;
}

Status CheckPassCost(const PassCost& cost, const HostInputs& in, int64_t max_response_bytes,
                     int64_t max_work_bytes) {
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
  if (cost.response_bytes > max_response_bytes) {
    return ResourceExhausted("the response would be " + std::to_string(cost.response_bytes) +
                             " bytes, over --max-response-bytes " +
                             std::to_string(max_response_bytes) + ": " + how);
  }
  if (cost.work_bytes > max_work_bytes) {
    return ResourceExhausted("the forward pass would need about " +
                             std::to_string(cost.work_bytes) + " bytes of working memory, over " +
                             "--max-work-bytes " + std::to_string(max_work_bytes) + ": " + how);
  }
  return Status::Ok();
}

}  // namespace mha::serve
