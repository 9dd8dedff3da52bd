#include "server/serving/kinds/multihead/merge/host_merge.h"

#include <ATen/ATen.h>

#include <cstring>
#include <memory>

#include "mha/tensor_adapter.h"

namespace mha::serve {
namespace {

bool PlainHostQuery(const HostInputs& in, const HostInputs& first) {
  return in.query.defined() && !in.query.on_device() && in.query.dim() == 3 &&
         in.query.dtype() == first.query.dtype() && in.query.size(2) == first.query.size(2) &&
         !in.key.defined() && !in.value.defined() && !in.key_padding_mask.defined() &&
         !in.attn_mask.defined() && !in.need_weights && !in.wants_head_options() &&
         in.is_causal == first.is_causal;
}

}  // namespace

bool MergeHostQueries(const std::vector<const HostInputs*>& requests, MergedBatch* batch) {
  if (requests.empty()) return false;
  const HostInputs& first = *requests.front();
  if (!first.query.defined()) return false;
  const int64_t t = first.query.size(1);
  int64_t rows = 0;
  for (const HostInputs* in : requests) {
    // One T: a shorter one's padded keys would need a key padding mask (MergeInputs makes it).
    if (!PlainHostQuery(*in, first) || in->query.size(1) != t) return false;
    rows += in->query.size(0);
  }
  const int64_t e = first.query.size(2);
  const size_t row_bytes = static_cast<size_t>(e) * ElementSize(first.query.dtype());
  MergedBatch merged;
  merged.inputs.query =
      at::empty({rows, t, e}, at::TensorOptions().dtype(ToScalarType(first.query.dtype())));
  merged.inputs.is_causal = first.is_causal;
  merged.inputs.need_weights = false;
  merged.t_max = merged.s_max = t;
  char* dst = static_cast<char*>(merged.inputs.query.data_ptr());
  int64_t offset = 0;
  for (const HostInputs* in : requests) {
    RequestShape shape;
    shape.rows = in->query.size(0);
    shape.t = shape.s = t;
    merged.parts.push_back(shape);
    merged.row_offsets.push_back(offset);
    std::memcpy(dst + static_cast<size_t>(offset * t) * row_bytes, in->query.data(),
                in->query.bytes());
    offset += shape.rows;
  }
  *batch = std::move(merged);
  return true;
}

bool SplitHostOutputs(const MergedBatch& batch, const ForwardOutputs& merged,
                      const std::vector<const OutputTypes*>& types,
                      std::vector<HostOutputs>* outs) {
  const at::Tensor& out = merged.output;
  if (!out.defined() || !out.is_cpu() || !out.is_contiguous() || out.dim() != 3 ||
      merged.attn_weights.defined() || merged.topk_values.defined() ||
      merged.topk_indices.defined() || merged.head_entropy.defined() ||
      merged.head_max_weight.defined() || types.size() != batch.parts.size()) {
    return false;
  }
  StatusOr<ElementType> type = ToElementType(out.scalar_type());
  if (!type.ok()) return false;
  for (const OutputTypes* t : types) {
    if (t->output != *type || t->output_place.defined()) return false;
  }
  const int64_t t_max = out.size(1), e = out.size(2);
  for (size_t i = 0; i < batch.parts.size(); ++i) {  // every request's rows inside the output
    const RequestShape& s = batch.parts[i];
    if (batch.row_offsets.size() != batch.parts.size() || s.t > t_max || batch.row_offsets[i] < 0 ||
        batch.row_offsets[i] + s.rows > out.size(0)) {
      return false;
    }
  }
  const size_t row_bytes = static_cast<size_t>(e) * out.element_size();
  const char* base = static_cast<const char*>(out.data_ptr());
  std::vector<HostOutputs> split(batch.parts.size());
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    const RequestShape& s = batch.parts[i];
    const size_t bytes = static_cast<size_t>(s.rows * s.t) * row_bytes;
    std::shared_ptr<char[]> buffer(new char[bytes]);
    const char* src = base + static_cast<size_t>(batch.row_offsets[i] * t_max) * row_bytes;
    for (int64_t b = 0; b < s.rows; ++b) {  // each batch row's first T_i of T_max rows
      std::memcpy(buffer.get() + static_cast<size_t>(b * s.t) * row_bytes,
                  src + static_cast<size_t>(b * t_max) * row_bytes,
                  static_cast<size_t>(s.t) * row_bytes);
    }
    const char* data = buffer.get();
    auto view = HostTensor::View(*type, {s.rows, s.t, e}, data, bytes,
                                 std::shared_ptr<const void>(std::move(buffer), data), "output");
    if (!view.ok()) return false;
    split[i].output = std::move(view).value();
  }
  *outs = std::move(split);
  return true;
}

}  // namespace mha::serve
