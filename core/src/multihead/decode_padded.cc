#include "multihead/decode_padded.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "mha/attention_ops.h"
#include "mha/device_stream.h"
#include "mha/kv_batch.h"

namespace mha {

bool PrefersPadded(StepAttention attention, const KvBlockPool& pool) {
  return attention == StepAttention::kPadded ||
         (attention == StepAttention::kPerSession && !pool.keys().is_cpu());
}

bool PaddedAttentionApplies(const std::vector<StepItem>& items) {
  if (items.size() < 2) return false;
  int64_t rows = 0, real = 0, longest = 0;
  for (const StepItem& item : items) {
    const StepInputs& in = *item.inputs;
    if (in.query.size(1) != 1 || in.need_weights || in.key_padding_mask.defined() ||
        in.attn_mask.defined() || &item.cache->pool() != &items.front().cache->pool()) {
      return false;
    }
    const int64_t length = item.cache->length() + (item.cross ? 0 : 1);
    rows += item.cache->rows();
    real += item.cache->rows() * length;
    longest = std::max(longest, length);
  }
  return KvBatch::PaddingFits(rows, longest, real, items.front().cache->pool().bytes_per_token());
}

}  // namespace mha

namespace mha::internal {

at::Tensor AttendPadded(const MhaModel& model, const std::vector<StepItem>& items,
                        const at::Tensor& q_all, const at::Tensor& k_all, const at::Tensor& v_all) {
  const MhaOptions& o = model.options();
  const int64_t e = o.embed_dim, h = o.num_heads;
  std::vector<KvCache*> appending;
  std::vector<int64_t> self_rows;  // row ids of q_all's self-attention rows
  std::vector<const KvCache*> caches;
  int64_t n = 0;
  for (const StepItem& item : items) {
    const int64_t b = item.cache->rows();
    if (!item.cross) {
      appending.push_back(item.cache);
      for (int64_t r = n; r < n + b; ++r) self_rows.push_back(r);
    }
    caches.push_back(item.cache);
    n += b;
  }
  if (!appending.empty()) {
    auto rows_of = [&](const at::Tensor& x) {
      if (static_cast<int64_t>(self_rows.size()) == n) return x;
      return x.index_select(0, IdsToDevice(self_rows, x.device()));
    };
    const auto count = static_cast<int64_t>(self_rows.size());
    KvBatch::Append(appending, rows_of(k_all).view({count, 1, e}),
                    rows_of(v_all).view({count, 1, e}));
  }
  KvBatch::Padded kv = KvBatch::Gather(caches);
  at::Tensor kh = kv.keys, vh = kv.values;
  const at::Tensor qh = split_heads(q_all.view({n, 1, e}), h);
  const MhaWeights& w = model.weights();
  if (o.add_bias_kv) {
    kh = at::cat({kh, split_heads(w.bias_k.expand({n, 1, e}), h)}, 2);
    vh = at::cat({vh, split_heads(w.bias_v.expand({n, 1, e}), h)}, 2);
  }
  if (o.add_zero_attn) {
    at::Tensor zeros = at::zeros({n, h, 1, o.head_dim()}, qh.options());
    kh = at::cat({kh, zeros}, 2);
    vh = at::cat({vh, zeros}, 2);
  }
  const at::Tensor mask = KvBatch::PaddingMask(kv, kh.size(2), qh.options());
  at::Tensor weights;
  const at::Tensor per_head = fused_kernel_preferred(qh)
                                  ? fused_attention(qh, kh, vh, mask, false)
                                  : attention_with_weights(qh, kh, vh, mask, &weights);
  return combine_heads(per_head).view({n, e});
}

}  // namespace mha::internal
