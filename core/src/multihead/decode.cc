#include "mha/decode.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <string>
#include <utility>

#include "attention/panel_gemm.h"
#include "mha/attention_blocks.h"
#include "mha/attention_ops.h"
#include "mha/device_stream.h"
#include "mha/paged_attention.h"
#include "mha/runtime.h"
#include "mha/shape_string.h"
#include "mha/tensor_util.h"
#include "multihead/decode_padded.h"

namespace mha {
namespace {

std::string Shape(const at::Tensor& t) { return ShapeString(t.sizes()); }

bool IsFloating(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()); }

Status CheckMaskDtype(const at::Tensor& mask, const std::string& field) {
  if (mask.scalar_type() == at::kBool || IsFloating(mask)) return Status::Ok();
  return InvalidArgument(field + ": dtype must be bool or floating, got " +
                         std::string(c10::toString(mask.scalar_type())));
}

// The keys a step attends (without add_bias_kv / add_zero_attn), and how to say so.
int64_t StepKeys(const KvCache& cache, bool cross, int64_t t) {
  return cross ? cache.length() : cache.length() + t;
}
std::string StepKeysWords(const KvCache& cache, bool cross, int64_t t) {
  if (cross) return "the session's " + std::to_string(cache.length()) + " encoder keys";
  return std::to_string(cache.length()) + " cached + " + std::to_string(t) + " new tokens";
}

Status CheckStepMasks(const MhaOptions& options, const KvCache& cache, bool cross,
                      const StepInputs& in) {
  const int64_t b = in.query.size(0), t = in.query.size(1), s = StepKeys(cache, cross, t);
  const std::string covers = " (masks cover " + StepKeysWords(cache, cross, t) + ")";
  if (const at::Tensor& m = in.key_padding_mask; m.defined()) {
    MHA_RETURN_IF_ERROR(CheckMaskDtype(m, "key_padding_mask"));
    if (m.dim() != 2 || m.size(0) != b || m.size(1) != s) {
      return InvalidArgument("key_padding_mask: expected shape " + ShapeString({b, s}) + covers +
                             ", got " + Shape(m));
    }
  }
  if (const at::Tensor& m = in.attn_mask; m.defined()) {
    MHA_RETURN_IF_ERROR(CheckMaskDtype(m, "attn_mask"));
    const bool ok2 = m.dim() == 2 && m.size(0) == t && m.size(1) == s;
    const bool ok3 =
        m.dim() == 3 && m.size(0) == b * options.num_heads && m.size(1) == t && m.size(2) == s;
    if (!ok2 && !ok3) {
      return InvalidArgument("attn_mask: expected shape " + ShapeString({t, s}) + " or " +
                             ShapeString({b * options.num_heads, t, s}) + covers + ", got " +
                             Shape(m));
    }
  }
  return Status::Ok();
}

// Each present mask in parts (mha/attention_blocks.h), broadcastable to [B, H, T, S + extra]; the
// causal part is bottom-right aligned (new token i sees the keys up to S - T + i).
MaskParts StepMask(const StepInputs& in, bool causal, int64_t h, int64_t s, int64_t extra,
                   const at::TensorOptions& opts) {
  const int64_t b = in.query.size(0), t = in.query.size(1);
  MaskParts parts;
  parts.options = opts;
  if (in.attn_mask.defined()) {
    const at::Tensor& a = in.attn_mask;
    parts.terms.push_back(a.dim() == 2 ? a.reshape({1, 1, t, s}) : a.reshape({b, h, t, s}));
  }
  if (in.key_padding_mask.defined())
    parts.terms.push_back(in.key_padding_mask.reshape({b, 1, 1, s}));
  if (causal && t > 1) parts.causal_diagonal = s - t + 1;  // one new token sees every cached key
  if (!parts.empty()) parts.extra_keys = extra;
  return parts;
}

// The attention of new tokens qh [B, H, T, D] over kh, vh [B, H, S', D]: the fused kernel where it
// is preferred and one block holds the scores, else blocks of query rows; the weights asked for
// (averaged over the heads when asked) land in one buffer, block by block.
at::Tensor AttendBlocks(const MhaOptions& o, const StepInputs& in, const at::Tensor& qh,
                        const at::Tensor& kh, const at::Tensor& vh, const MaskParts& mask,
                        at::Tensor* weights) {
  const int64_t b = qh.size(0), h = qh.size(1), t = qh.size(2), keys = kh.size(2);
  const int64_t block_bytes = qh.is_cuda() ? 0 : o.attention_block_bytes;  // CUDA: one block
  const int64_t rows = AttentionBlockRows(b, h, t, keys, qh.element_size(), block_bytes);
  if (!in.need_weights && fused_kernel_preferred(qh) && rows >= t) {
    return fused_attention(qh, kh, vh, mask.Rows(0, t, keys - mask.extra_keys), false);
  }
  if (!in.need_weights) return blocked_attention(qh, kh, vh, mask, false, block_bytes);
  const bool average = in.average_attn_weights;
  return blocked_attention(
      qh, kh, vh, mask, false, block_bytes, [&](int64_t begin, at::Tensor probs) {
        const at::Tensor part = average ? probs.sum(1) / static_cast<double>(h) : probs;
        if (rows >= t) {
          *weights = part;
          return probs;
        }
        if (!weights->defined()) {
          *weights = average ? at::empty({b, t, keys}, probs.options())
                             : at::empty({b, h, t, keys}, probs.options());
        }
        weights->narrow(average ? 1 : 2, begin, probs.size(2)).copy_(part);
        return probs;
      });
}

// One item's attention over its cache; q (and k, v for self-attention) are the new tokens'
// projections [B, T, E]. Returns combine_heads of the per-head output, [B, T, E].
at::Tensor AttendItem(const MhaModel& model, const StepItem& item, const at::Tensor& q,
                      const at::Tensor& k, const at::Tensor& v, at::Tensor* weights) {
  const MhaOptions& o = model.options();
  const MhaWeights& w = model.weights();
  KvCache& cache = *item.cache;
  if (!item.cross) cache.Append(k, v);
  const int64_t b = q.size(0), h = o.num_heads, s = cache.length();
  at::Tensor qh = split_heads(q, h), kh = cache.Keys(), vh = cache.Values();
  if (o.add_bias_kv) {
    kh = at::cat({kh, split_heads(w.bias_k.expand({b, 1, o.embed_dim}), h)}, 2);
    vh = at::cat({vh, split_heads(w.bias_v.expand({b, 1, o.embed_dim}), h)}, 2);
  }
  if (o.add_zero_attn) {
    at::Tensor zeros = at::zeros({b, h, 1, o.head_dim()}, qh.options());
    kh = at::cat({kh, zeros}, 2);
    vh = at::cat({vh, zeros}, 2);
  }
  const int64_t extra = (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  const StepInputs& in = *item.inputs;
  const MaskParts mask = StepMask(in, !item.cross, h, s, extra, qh.options());
  return combine_heads(AttendBlocks(o, in, qh, kh, vh, mask, weights));
}

// Each item's attention, per session: combine_heads rows [B * T, E] per item, weights set.
std::vector<at::Tensor> AttendEach(const MhaModel& model, const std::vector<StepItem>& items,
                                   const at::Tensor& q_all, const at::Tensor& k_all,
                                   const at::Tensor& v_all) {
  const MhaOptions& o = model.options();
  const at::ScalarType out_type = ToScalarType(o.dtype);
  const int64_t e = o.embed_dim;
  std::vector<at::Tensor> combined;
  int64_t offset = 0;
  for (const StepItem& item : items) {
    const int64_t b = item.inputs->query.size(0), t = item.inputs->query.size(1), n = b * t;
    auto rows = [&](const at::Tensor& x) { return x.narrow(0, offset, n).view({b, t, e}); };
    at::Tensor weights;
    combined.push_back(AttendItem(model, item, rows(q_all), item.cross ? at::Tensor() : rows(k_all),
                                  item.cross ? at::Tensor() : rows(v_all), &weights)
                           .view({n, e}));
    if (item.inputs->need_weights) {  // averaged by AttendBlocks when asked
      item.outputs->attn_weights = weights.to(out_type);
    } else {
      item.outputs->attn_weights = at::Tensor();
    }
    offset += n;
  }
  return combined;
}

// One output projection over every item's rows, split back into the items' outputs.
void ProjectOutputs(const MhaModel& model, const std::vector<StepItem>& items,
                    const std::vector<at::Tensor>& combined) {
  const MhaWeights& w = model.weights();
  const c10::Device device = w.out_weight.device();
  const int64_t e = model.options().embed_dim;
  const at::Tensor joined = combined.size() == 1 ? combined[0] : at::cat(combined, 0);
  at::Tensor out_all =
      (model.out_weight_t().defined()
           ? internal::LinearT(joined, model.out_weight_t(), w.out_bias, model.out_panels())
           : at::linear(joined, w.out_weight, w.out_bias))
          .to(ToScalarType(model.options().dtype));
  const bool all_host = std::none_of(items.begin(), items.end(), [](const StepItem& item) {
    return item.inputs->query.is_cuda();
  });
  if (device.is_cuda() && all_host) out_all = CopyToHost(out_all);  // one copy for every item
  int64_t offset = 0;
  for (const StepItem& item : items) {
    const at::Tensor& query = item.inputs->query;
    const int64_t b = query.size(0), t = query.size(1);
    at::Tensor out = out_all.narrow(0, offset, b * t).view({b, t, e});
    at::Tensor& weights = item.outputs->attn_weights;
    if (device.is_cuda() && !query.is_cuda()) {  // host in, host out
      out = CopyToHost(out);
      weights = CopyToHost(weights);
    }
    item.outputs->output = out;
    offset += b * t;
  }
}

// Q, K and V of every new token when some item is self-attention and the model has the fused
// in-projection: on the CPU one GEMM on its transposed copy (MhaModel::in_proj_weight_t) for any
// number of rows; elsewhere one GEMM on it from kFusedRows rows on (q, k, v are column views of
// its output). Else one GEMM per weight (q only when every item is cross-attention). Below
// kFusedRows OpenBLAS (0.3.21, this box) runs three [E, E] GEMMs of the checkpoint's layout about
// twice as fast as one [3E, E] (E=512, one thread: 1 row 180 vs 380 us, 2 rows 280 vs 540 us).
constexpr int64_t kFusedRows = 4;

void Project(const MhaModel& model, const at::Tensor& all, bool any_self, at::Tensor* q,
             at::Tensor* k, at::Tensor* v) {
  const MhaWeights& w = model.weights();
  const int64_t e = model.options().embed_dim;
  if (any_self && model.in_proj_weight().defined() &&
      (model.in_proj_weight_t().defined() || all.size(0) >= kFusedRows)) {
    const at::Tensor qkv = model.in_proj_weight_t().defined()
                               ? internal::LinearT(all, model.in_proj_weight_t(),
                                                   model.in_proj_bias(), model.in_proj_panels())
                               : at::linear(all, model.in_proj_weight(), model.in_proj_bias());
    *q = qkv.narrow(1, 0, e);
    *k = qkv.narrow(1, e, e);
    *v = qkv.narrow(1, 2 * e, e);
    return;
  }
  *q = at::linear(all, w.q_weight, w.q_bias);
  if (any_self) {
    *k = at::linear(all, w.k_weight, w.k_bias);
    *v = at::linear(all, w.v_weight, w.v_bias);
  }
}

// The paged path (mha/paged_attention.h): every self-attention item's new keys and values
// written into its pages, then one pass that reads the pages in place. [N, E] rows.
at::Tensor AttendPaged(const MhaModel& model, const std::vector<StepItem>& items,
                       const at::Tensor& q_all, const at::Tensor& k_all, const at::Tensor& v_all) {
  const int64_t e = model.options().embed_dim;
  int64_t offset = 0;
  for (const StepItem& item : items) {
    const int64_t b = item.inputs->query.size(0), t = item.inputs->query.size(1), n = b * t;
    if (!item.cross) {
      item.cache->Append(k_all.narrow(0, offset, n).view({b, t, e}),
                         v_all.narrow(0, offset, n).view({b, t, e}));
    }
    item.outputs->attn_weights = at::Tensor();
    offset += n;
  }
  return PagedAttention(model, items, q_all);
}

void RunSteps(const MhaModel& model, const std::vector<StepItem>& items, StepAttention attention) {
  const MhaWeights& w = model.weights();
  const c10::Device device = w.out_weight.device();
  const at::ScalarType compute = w.out_weight.scalar_type();
  const int64_t e = model.options().embed_dim;
  std::vector<at::Tensor> flat;
  bool any_self = false;
  for (const StepItem& item : items) {
    flat.push_back(item.inputs->query.reshape({-1, e}));
    any_self = any_self || !item.cross;
  }
  const at::Tensor all = JoinRows(std::move(flat), device, compute);
  at::Tensor q_all, k_all, v_all;
  Project(model, all, any_self, &q_all, &k_all, &v_all);
  std::vector<at::Tensor> combined;
  if (PrefersPadded(attention, items.front().cache->pool()) && PaddedAttentionApplies(items)) {
    combined.push_back(internal::AttendPadded(model, items, q_all, k_all, v_all));
    for (const StepItem& item : items) item.outputs->attn_weights = at::Tensor();
  } else if (attention != StepAttention::kGather && PagedAttentionApplies(model, items)) {
    combined.push_back(AttendPaged(model, items, q_all, k_all, v_all));
  } else {
    combined = AttendEach(model, items, q_all, k_all, v_all);
  }
  ProjectOutputs(model, items, combined);
}

}  // namespace

Status CheckStepInputs(const MhaOptions& options, const KvCache& cache, bool cross,
                       const StepInputs& in) {
  const at::Tensor& q = in.query;
  if (!q.defined()) return InvalidArgument("query: required (the step's new tokens [B, T, E])");
  if (q.dim() != 3 || q.size(0) != cache.rows() || q.size(1) < 1 ||
      q.size(2) != options.embed_dim) {
    return InvalidArgument("query: expected shape [" + std::to_string(cache.rows()) + ", T >= 1, " +
                           std::to_string(options.embed_dim) +
                           "] (the session's batch size, new tokens, embed_dim), got " + Shape(q));
  }
  if (!IsFloating(q)) {
    return InvalidArgument("query: dtype must be floating, got " +
                           std::string(c10::toString(q.scalar_type())));
  }
  return CheckStepMasks(options, cache, cross, in);
}

Status DecodeSteps(const MhaModel& model, const std::vector<StepItem>& items,
                   StepAttention attention) {
  if (items.empty()) return Status::Ok();
  std::vector<int64_t> lengths;
  for (const StepItem& item : items) lengths.push_back(item.cache->length());
  std::string error;
  try {
    c10::InferenceMode guard;
    RunSteps(model, items, attention);
    return Status::Ok();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  for (size_t i = 0; i < items.size(); ++i) items[i].cache->RollbackTo(lengths[i]);
  return Internal("decode step failed: " + error);
}

Status DecodeStep(const MhaModel& model, KvCache* cache, bool cross, const StepInputs& in,
                  ForwardOutputs* out) {
  return DecodeSteps(model, {StepItem{cache, cross, &in, out}});
}

Status PrefillCross(const MhaModel& model, KvCache* cache, const at::Tensor& key,
                    const at::Tensor& value) {
  const MhaOptions& o = model.options();
  auto check = [&](const at::Tensor& t, const char* field, int64_t dim,
                   const char* dim_name) -> Status {
    if (!t.defined()) {
      return InvalidArgument(std::string(field) +
                             ": required (a cross-attention session needs key and value)");
    }
    if (t.dim() != 3 || t.size(0) != cache->rows() || t.size(2) != dim || !IsFloating(t)) {
      return InvalidArgument(std::string(field) + ": expected floating [" +
                             std::to_string(cache->rows()) + ", S, " + std::to_string(dim) +
                             "] (batch_size, encoder tokens, " + dim_name + "), got " + Shape(t) +
                             " " + std::string(c10::toString(t.scalar_type())));
    }
    return Status::Ok();
  };
  MHA_RETURN_IF_ERROR(check(key, "key", o.key_dim(), "kdim"));
  MHA_RETURN_IF_ERROR(check(value, "value", o.value_dim(), "vdim"));
  if (key.size(1) != value.size(1)) {
    return InvalidArgument("key and value: sequence lengths differ (" +
                           std::to_string(key.size(1)) + " vs " + std::to_string(value.size(1)) +
                           ")");
  }
  if (cache->length() != 0) return FailedPrecondition("PrefillCross: the cache is not empty");
  MHA_RETURN_IF_ERROR(cache->Reserve(key.size(1)));
  try {
    c10::InferenceMode guard;
    const MhaWeights& w = model.weights();
    const auto device = w.out_weight.device();
    const auto compute = w.out_weight.scalar_type();
    cache->Append(at::linear(key.to(device, compute), w.k_weight, w.k_bias),
                  at::linear(value.to(device, compute), w.v_weight, w.v_bias));
  } catch (const c10::Error& e) {
    cache->Release();
    return Internal(std::string("projecting the session's key/value failed: ") +
                    e.what_without_backtrace());
  }
  return Status::Ok();
}

}  // namespace mha
