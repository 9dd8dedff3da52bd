#include "mha/head_selection.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "mha/shape_string.h"

namespace mha {

namespace {

Status CheckSelection(const WeightsSelection& s, int64_t heads, int64_t t, int64_t keys,
                      bool need_weights) {
  const bool any = s.any();
  if (any && !need_weights) {
    const char* field = !s.heads.empty() ? "weights_heads"
                        : s.top_k > 0    ? "weights_top_k"
                        : s.query_begin  ? "weights_query_begin"
                                         : "weights_query_end";
    return InvalidArgument(std::string(field) + ": selects attention weights, so it needs " +
                           "need_weights=true");
  }
  std::set<int64_t> seen;
  for (size_t i = 0; i < s.heads.size(); ++i) {
    const int64_t h = s.heads[i];
    if (h < 0 || h >= heads) {
      return InvalidArgument("weights_heads: head " + std::to_string(h) + " (element " +
                             std::to_string(i) + ") is out of range [0, " + std::to_string(heads) +
                             ")");
    }
    if (!seen.insert(h).second) {
      return InvalidArgument("weights_heads: head " + std::to_string(h) + " is listed twice");
    }
  }
  const int64_t begin = s.query_begin.value_or(0), end = s.query_end.value_or(t);
  if (begin < 0 || begin >= t) {
    return InvalidArgument("weights_query_begin: " + std::to_string(begin) +
                           " is out of range [0, T=" + std::to_string(t) + ")");
  }
  if (end <= begin || end > t) {
    return InvalidArgument("weights_query_end: " + std::to_string(end) + " must be in (begin=" +
                           std::to_string(begin) + ", T=" + std::to_string(t) +
                           "] (the row range [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") is empty or past T)");
  }
  if (s.top_k < 0 || s.top_k > keys) {
    return InvalidArgument("weights_top_k: " + std::to_string(s.top_k) +
                           " must be in [1, S'=" + std::to_string(keys) + "] (0 = dense weights)");
  }
  return Status::Ok();
}

}  // namespace

Status CheckHeadOptions(const MhaOptions& o, const ForwardInputs& in, int64_t keys) {
  const int64_t b = in.query.size(0), t = in.query.size(1), h = o.num_heads;
  MHA_RETURN_IF_ERROR(CheckSelection(in.weights_selection, h, t, keys, in.need_weights));
  if (in.weights_dtype && !in.need_weights) {
    return InvalidArgument(
        "weights_dtype: sets the dtype of the weights, so it needs "
        "need_weights=true");
  }
  if (in.head_mask.defined()) {
    const at::Tensor& m = in.head_mask;
    if (!m.is_floating_point()) {
      return InvalidArgument("head_mask: dtype " + std::string(c10::toString(m.scalar_type())) +
                             " is not supported, expected a floating-point dtype");
    }
    const bool ok1d = m.dim() == 1 && m.size(0) == h;
    const bool ok2d = m.dim() == 2 && m.size(0) == b && m.size(1) == h;
    if (!ok1d && !ok2d) {
      return InvalidArgument("head_mask: expected shape [H] = " + ShapeString({h}) +
                             " or [B, H] = " + ShapeString({b, h}) + ", got " +
                             ShapeString(m.sizes()));
    }
  }
  return Status::Ok();
}

void SelectWeights(const at::Tensor& probs, const WeightsSelection& s, bool average,
                   at::ScalarType dtype, ForwardOutputs* out) {
  at::Tensor w = probs;  // [B, H, T, S']
  const int64_t t = probs.size(2);
  const int64_t begin = s.query_begin.value_or(0), end = s.query_end.value_or(t);
  if (begin != 0 || end != t) w = w.narrow(2, begin, end - begin);  // a view
  if (!s.heads.empty()) {
    const at::Tensor index =
        at::tensor(s.heads, at::TensorOptions().dtype(at::kLong)).to(probs.device());
    w = w.index_select(1, index);  // copies just the kept heads (and rows)
  }
  if (average) w = w.sum(1) / static_cast<double>(w.size(1));  // PyTorch: sum over H / H
  if (s.top_k > 0) {
    auto [values, indices] = w.topk(s.top_k, -1, /*largest=*/true, /*sorted=*/true);
    out->topk_values = values.to(dtype);
    out->topk_indices = indices.to(s.topk_indices_int64 ? at::kLong : at::kInt);
    out->attn_weights = at::Tensor();
    return;
  }
  out->attn_weights = w.to(dtype);
}

void SelectWeightsRows(const at::Tensor& probs, int64_t begin, int64_t t, const WeightsSelection& s,
                       bool average, at::ScalarType dtype, ForwardOutputs* out) {
  const int64_t first = s.query_begin.value_or(0), end = s.query_end.value_or(t);
  const int64_t lo = std::max(first, begin), hi = std::min(end, begin + probs.size(2));
  if (lo >= hi) return;
  WeightsSelection rows = s;  // the block's own rows, all of them selected
  rows.query_begin.reset();
  rows.query_end.reset();
  ForwardOutputs block;
  SelectWeights(probs.narrow(2, lo - begin, hi - lo), rows, average, dtype, &block);
  const int64_t row_dim = average ? 1 : 2;  // [B, H', rows, X] or averaged [B, rows, X]
  auto place = [&](const at::Tensor& part, at::Tensor* whole) {
    if (!part.defined()) return;
    if (!whole->defined()) {
      std::vector<int64_t> sizes = part.sizes().vec();
      sizes[static_cast<size_t>(row_dim)] = end - first;
      *whole = at::empty(sizes, part.options());
    }
    whole->narrow(row_dim, lo - first, hi - lo).copy_(part);
  };
  place(block.attn_weights, &out->attn_weights);
  place(block.topk_values, &out->topk_values);
  place(block.topk_indices, &out->topk_indices);
}

}  // namespace mha
