#include "mha/llama_step.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "attention/panel_gemm.h"
#include "llama/llama_ops.h"
#include "mha/device_stream.h"
#include "mha/kv_batch.h"
#include "mha/paged_attention.h"
#include "mha/shape_string.h"
#include "mha/tensor_util.h"

namespace mha {

namespace {

std::string LayoutWords(int64_t heads, int64_t head_dim, at::ScalarType dtype,
                        const c10::Device& device) {
  return std::to_string(heads) + " heads of " + std::to_string(head_dim) + " " +
         std::string(c10::toString(dtype)) + " on " + device.str();
}

Status CheckItem(const LlamaAttentionStack& stack, const LlamaStepItem& item, size_t i) {
  const std::string where = "entry " + std::to_string(i) + ": ";
  if (item.cache == nullptr || item.output == nullptr) {
    return InvalidArgument(where + "a cache and an output are required");
  }
  const KvBlockPool& pool = item.cache->pool();
  const KvLayout want = stack.kv_layout();
  const KvLayout& have = pool.layout();
  if (have.heads != want.heads || have.head_dim != want.head_dim || have.dtype != want.dtype ||
      have.device != want.device) {
    return InvalidArgument(where + "the cache's pool stores " +
                           LayoutWords(have.heads, have.head_dim, have.dtype, have.device) +
                           " per token, the model's layers need " +
                           LayoutWords(want.heads, want.head_dim, want.dtype, want.device));
  }
  if (item.cache->rows() != 1) {
    return InvalidArgument(where + "a session's layer cache holds one sequence, this one " +
                           std::to_string(item.cache->rows()));
  }
  const at::Tensor& h = item.hidden;
  const int64_t e = stack.config().hidden_size;
  if (!h.defined() || h.dim() != 2 || h.size(0) < 1 || h.size(1) != e ||
      !at::isFloatingType(h.scalar_type())) {
    return InvalidArgument(
        where + "hidden: expected floating [t >= 1, " + std::to_string(e) +
        "] (new tokens, hidden_size), got " +
        (h.defined() ? ShapeString(h.sizes()) + " " + std::string(c10::toString(h.scalar_type()))
                     : std::string("none")));
  }
  return Status::Ok();
}

std::vector<const KvCache*> CachesOf(const std::vector<LlamaStepItem>& items) {
  std::vector<const KvCache*> caches;
  for (const LlamaStepItem& item : items) caches.push_back(item.cache);
  return caches;
}

bool OnDevice(const std::vector<LlamaStepItem>& items) {
  return !items.front().cache->pool().keys().is_cpu();
}

// Every item's new keys and values appended to its cache; k and v: [N, KV * D] in item order.
// `batched` (a device pool, or a padded pass) with every item the same number of tokens: one
// index op per store for all (KvBatch), where each cache's own append on a device copies its slot
// ids there and waits for the stream.
void AppendAll(const std::vector<LlamaStepItem>& items, const at::Tensor& k, const at::Tensor& v,
               bool batched) {
  const int64_t t0 = items.front().hidden.size(0);
  const bool same = std::all_of(items.begin(), items.end(),
                                [t0](const LlamaStepItem& i) { return i.hidden.size(0) == t0; });
  if (same && batched) {
    std::vector<KvCache*> caches;
    for (const LlamaStepItem& item : items) caches.push_back(item.cache);
    const auto n = static_cast<int64_t>(items.size());
    KvBatch::Append(caches, k.reshape({n, t0, -1}), v.reshape({n, t0, -1}));
    return;
  }
  int64_t offset = 0;
  for (const LlamaStepItem& item : items) {
    const int64_t t = item.hidden.size(0);
    item.cache->Append(k.narrow(0, offset, t).unsqueeze(0), v.narrow(0, offset, t).unsqueeze(0));
    offset += t;
  }
}

// Each item's attention over its gathered cache (after the append): [N, H * D].
at::Tensor AttendGathered(const LlamaConfig& c, const std::vector<LlamaStepItem>& items,
                          const at::Tensor& q) {
  std::vector<at::Tensor> outs;
  int64_t offset = 0;
  for (const LlamaStepItem& item : items) {
    const int64_t t = item.hidden.size(0);
    const at::Tensor qh =
        q.narrow(0, offset, t).reshape({1, t, c.num_attention_heads, c.head_dim}).transpose(1, 2);
    outs.push_back(internal::GroupedAttention(qh, item.cache->Keys(), item.cache->Values(),
                                              /*causal=*/true)
                       .view({t, c.q_dim()}));
    offset += t;
  }
  return outs.size() == 1 ? outs[0] : at::cat(outs, 0);
}

// Every item one new token (LlamaPaddedApplies): one gather of every cache, padded to the
// longest, and one grouped attention under the padding mask. [N, H * D].
at::Tensor AttendPadded(const LlamaConfig& c, const std::vector<LlamaStepItem>& items,
                        const at::Tensor& q) {
  const KvBatch::Padded kv = KvBatch::Gather(CachesOf(items));
  const int64_t n = q.size(0);
  const at::Tensor qh = q.reshape({n, 1, c.num_attention_heads, c.head_dim}).transpose(1, 2);
  const at::Tensor mask = KvBatch::PaddingMask(kv, kv.longest, q.options());
  return internal::GroupedAttention(qh, kv.keys, kv.values, /*causal=*/false, mask)
      .view({n, c.q_dim()});
}

at::Tensor AttendPaged(const LlamaConfig& c, const std::vector<LlamaStepItem>& items,
                       const at::Tensor& q) {
  std::vector<PagedItem> paged;
  paged.reserve(items.size());
  for (const LlamaStepItem& item : items) {
    paged.push_back(PagedItem{item.cache, item.hidden.size(0), /*causal=*/true});
  }
  return PagedAttention(items.front().cache->pool(), c.num_attention_heads, paged, q);
}

void RunStep(const LlamaAttentionStack& stack, int64_t layer,
             const std::vector<LlamaStepItem>& items, StepAttention attention) {
  const LlamaConfig& c = stack.config();
  const internal::LlamaLayer& w = stack.layer(layer);
  const KvLayout layout = stack.kv_layout();
  std::vector<at::Tensor> rows;
  std::vector<int64_t> positions;
  for (const LlamaStepItem& item : items) {
    rows.push_back(item.hidden);
    for (int64_t j = 0; j < item.hidden.size(0); ++j) positions.push_back(item.cache->length() + j);
  }
  const at::Tensor x = JoinRows(std::move(rows), layout.device, layout.dtype);  // [N, E]
  const int64_t n = x.size(0);
  at::Tensor q, k, v, cos, sin;
  internal::ProjectQkv(w, c, x, &q, &k, &v);
  internal::RopeTables(IdsToDevice(positions, layout.device), c, layout.dtype, &cos, &sin);
  q = internal::ApplyRope(q.reshape({n, c.num_attention_heads, c.head_dim}), cos, sin)
          .reshape({n, c.q_dim()});
  k = internal::ApplyRope(k.reshape({n, c.num_key_value_heads, c.head_dim}), cos, sin)
          .reshape({n, c.kv_dim()});
  const bool padded = PrefersPadded(attention, items.front().cache->pool()) &&
                      LlamaPaddedApplies(items);  // before the append: it counts the new token
  AppendAll(items, k, v, padded || OnDevice(items));
  at::Tensor attended;
  if (padded) {
    attended = AttendPadded(c, items, q);
  } else if (attention != StepAttention::kGather && LlamaPagedApplies(c, items)) {
    attended = AttendPaged(c, items, q);
  } else {
    attended = AttendGathered(c, items, q);
  }
  at::Tensor out =
      internal::LinearT(attended, w.o_weight_t, w.o_bias).to(ToScalarType(stack.dtype()));
  if (std::all_of(items.begin(), items.end(),
                  [](const LlamaStepItem& i) { return i.hidden.is_cpu(); })) {
    out = CopyToHost(out);  // one copy back for every item
  }
  int64_t offset = 0;
  for (const LlamaStepItem& item : items) {
    const int64_t t = item.hidden.size(0);
    *item.output = out.narrow(0, offset, t).to(item.hidden.device());
    offset += t;
  }
}

}  // namespace

Status CheckLlamaStep(const LlamaAttentionStack& stack, int64_t layer,
                      const std::vector<LlamaStepItem>& items) {
  if (layer < 0 || layer >= stack.num_layers()) {
    return InvalidArgument("layer " + std::to_string(layer) + " out of range: the model has " +
                           std::to_string(stack.num_layers()) + " layers (0 .. " +
                           std::to_string(stack.num_layers() - 1) + ")");
  }
  std::map<const KvCache*, size_t> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    MHA_RETURN_IF_ERROR(CheckItem(stack, items[i], i));
    auto [it, fresh] = seen.emplace(items[i].cache, i);
    if (!fresh) {
      return InvalidArgument("entries " + std::to_string(it->second) + " and " + std::to_string(i) +
                             " step the same cache: one entry per session and layer in a step");
    }
  }
  return Status::Ok();
}

bool LlamaPagedApplies(const LlamaConfig& config, const std::vector<LlamaStepItem>& items) {
  static_cast<void>(config);  // any number of query heads per K/V head (paged_kernel.h)
  if (items.empty()) return false;
  const KvBlockPool& pool = items.front().cache->pool();
  if (!PagedPoolSupported(pool)) return false;
  for (const LlamaStepItem& item : items) {
    if (&item.cache->pool() != &pool || item.hidden.size(0) > kMaxPagedTokens) return false;
  }
  return true;
}

bool LlamaPaddedApplies(const std::vector<LlamaStepItem>& items) {
  if (items.size() < 2) return false;
  const KvBlockPool& pool = items.front().cache->pool();
  int64_t real = 0, longest = 0;
  for (const LlamaStepItem& item : items) {
    if (&item.cache->pool() != &pool || item.hidden.size(0) != 1) return false;
    real += item.cache->length() + 1;
    longest = std::max(longest, item.cache->length() + 1);
  }
  const auto rows = static_cast<int64_t>(items.size());
  return KvBatch::PaddingFits(rows, longest, real, pool.bytes_per_token());
}

Status LlamaLayerStep(const LlamaAttentionStack& stack, int64_t layer,
                      const std::vector<LlamaStepItem>& items, StepAttention attention) {
  if (items.empty()) return Status::Ok();
  std::vector<int64_t> lengths;
  for (const LlamaStepItem& item : items) lengths.push_back(item.cache->length());
  std::string error;
  try {
    c10::InferenceMode guard;
    RunStep(stack, layer, items, attention);
    return Status::Ok();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  for (size_t i = 0; i < items.size(); ++i) items[i].cache->RollbackTo(lengths[i]);
  return Internal("Llama layer step failed: " + error);
}

}  // namespace mha
