// Merging and slicing tensors for the dynamic batcher (batch_merge.h).
#include "server/serving/kinds/multihead/merge/batch_merge.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "mha/tensor_util.h"

namespace mha::serve {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The same conversion MhaModel applies (mha/tensor_util.h), on the CPU where merging happens.
at::Tensor Additive(const at::Tensor& mask, at::ScalarType dtype) {
  return ToAdditiveMask(mask, dtype, mask.device());
}

// Where merged parts meet: the first part's CUDA device if any is on one (a request whose tensors
// are in CUDA shared memory), else the CPU.
at::Device MergeDevice(const std::vector<at::Tensor>& parts) {
  for (const at::Tensor& part : parts) {
    if (part.defined() && part.is_cuda()) return part.device();
  }
  return at::Device(at::kCPU);
}

// [B_i, L_i, D] tensors -> [sum B_i, L_max, D], zero-padded along dim 1, on MergeDevice.
at::Tensor PadCat(const std::vector<at::Tensor>& parts, int64_t length) {
  std::vector<at::Tensor> padded;
  padded.reserve(parts.size());
  const at::Device device = MergeDevice(parts);
  for (const at::Tensor& part : parts) {
    const int64_t missing = length - part.size(1);
    const at::Tensor here = part.to(device);
    padded.push_back(missing > 0 ? at::constant_pad_nd(here, {0, 0, 0, missing}, 0) : here);
  }
  return padded.size() == 1 ? padded.front() : at::cat(padded, 0);
}

// Columns [0, s) and the last `extra` columns of `w` (last dim s_max + extra).
at::Tensor KeyColumns(const at::Tensor& w, int64_t s, int64_t s_max, int64_t extra) {
  if (s == s_max) return w;
  if (extra == 0) return w.narrow(-1, 0, s);
  return at::cat({w.narrow(-1, 0, s), w.narrow(-1, s_max, extra)}, -1);
}

// Rows, query length and key length of validated inputs (batch_assembly.h's ShapeOf, on tensors).
RequestShape TensorShape(const ForwardInputs& in) {
  RequestShape shape;
  shape.rows = in.query.size(0);
  shape.t = in.query.size(1);
  shape.s = in.key.defined() ? in.key.size(1) : shape.t;
  return shape;
}

}  // namespace

MergedBatch MergeInputs(const std::vector<const ForwardInputs*>& requests,
                        const BatchModelInfo& info) {
  MergedBatch batch;
  const ForwardInputs& first = *requests.front();
  batch.cross = first.key.defined();
  int64_t rows = 0;
  bool any_kpm = false, any_attn_mask = false;
  std::vector<at::Tensor> queries, keys, values;
  for (const ForwardInputs* in : requests) {
    const RequestShape shape = TensorShape(*in);
    batch.parts.push_back(shape);
    batch.row_offsets.push_back(rows);
    rows += shape.rows;
    batch.t_max = std::max(batch.t_max, shape.t);
    batch.s_max = std::max(batch.s_max, shape.s);
    any_kpm = any_kpm || in->key_padding_mask.defined();
    any_attn_mask = any_attn_mask || in->attn_mask.defined();
    queries.push_back(in->query);
    if (batch.cross) {
      keys.push_back(in->key);
      values.push_back(in->value);
    }
  }
  ForwardInputs& merged = batch.inputs;
  merged.is_causal = first.is_causal;
  merged.need_weights = first.need_weights;
  merged.average_attn_weights = first.average_attn_weights;
  merged.query = PadCat(queries, batch.t_max);
  if (batch.cross) {
    merged.key = PadCat(keys, batch.s_max);
    merged.value = PadCat(values, batch.s_max);
  }
  const auto mask_options = at::TensorOptions().dtype(ToScalarType(info.mask_dtype));
  const bool padded_keys = std::any_of(batch.parts.begin(), batch.parts.end(),
                                       [&](const RequestShape& s) { return s.s < batch.s_max; });
  if (any_kpm || padded_keys) {
    // Keys beyond S_i are -inf for request i's rows; its own mask (additive) fills [0, S_i).
    merged.key_padding_mask = at::full({rows, batch.s_max}, kNegInf, mask_options);
    for (size_t i = 0; i < requests.size(); ++i) {
      const RequestShape& s = batch.parts[i];
      at::Tensor own =
          merged.key_padding_mask.narrow(0, batch.row_offsets[i], s.rows).narrow(1, 0, s.s);
      const at::Tensor& kpm = requests[i]->key_padding_mask;
      if (kpm.defined()) {
        own.copy_(Additive(kpm, ToScalarType(info.mask_dtype)));
      } else {
        own.zero_();
      }
    }
  }
  if (any_attn_mask) {
    // [rows*H, T_max, S_max]: request i's mask in its rows' [T_i, S_i] corner, 0 elsewhere (padded
    // query rows are dropped; padded keys are already -inf through key_padding_mask).
    const int64_t h = info.num_heads;
    merged.attn_mask = at::zeros({rows * h, batch.t_max, batch.s_max}, mask_options);
    for (size_t i = 0; i < requests.size(); ++i) {
      const at::Tensor& mask = requests[i]->attn_mask;
      if (!mask.defined()) continue;
      const RequestShape& s = batch.parts[i];
      at::Tensor own = merged.attn_mask.narrow(0, batch.row_offsets[i] * h, s.rows * h)
                           .narrow(1, 0, s.t)
                           .narrow(2, 0, s.s);
      at::Tensor additive = Additive(mask, ToScalarType(info.mask_dtype));
      own.copy_(additive.dim() == 2 ? additive.unsqueeze(0).expand({s.rows * h, s.t, s.s})
                                    : additive);
    }
  }
  return batch;
}

std::vector<ForwardOutputs> SplitOutputs(const MergedBatch& batch, const ForwardOutputs& merged,
                                         const BatchModelInfo& info) {
  std::vector<ForwardOutputs> outputs(batch.parts.size());
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    const RequestShape& s = batch.parts[i];
    const int64_t offset = batch.row_offsets[i];
    outputs[i].output = merged.output.narrow(0, offset, s.rows).narrow(1, 0, s.t).clone();
    if (merged.attn_weights.defined()) {
      // [rows, T, S'] averaged or [rows, H, T, S'] per head.
      const at::Tensor& w = merged.attn_weights;
      const int64_t t_dim = w.dim() == 3 ? 1 : 2;
      at::Tensor own = w.narrow(0, offset, s.rows).narrow(t_dim, 0, s.t);
      outputs[i].attn_weights = KeyColumns(own, s.s, batch.s_max, info.extra_keys).clone();
    }
  }
  return outputs;
}

}  // namespace mha::serve
