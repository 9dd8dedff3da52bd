#include "mha/attention_blocks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "mha/attention_ops.h"
#include "mha/tensor_util.h"

namespace mha {

at::Tensor MaskParts::Rows(int64_t begin, int64_t rows, int64_t key_end) const {
  const at::ScalarType dtype = c10::typeMetaToScalarType(options.dtype());
  at::Tensor mask;
  auto add = [&mask](at::Tensor term) { mask = mask.defined() ? mask + term : std::move(term); };
  for (const at::Tensor& term : terms) {
    at::Tensor part = term.size(2) == 1 ? term : term.narrow(2, begin, rows);
    if (key_end < part.size(3)) part = part.narrow(3, 0, key_end);
    add(ToAdditiveMask(part, dtype, options.device()));
  }
  if (causal_diagonal) {
    const double neg_inf = -std::numeric_limits<double>::infinity();
    add(at::full({rows, key_end}, neg_inf, options)
            .triu(begin + *causal_diagonal)
            .view({1, 1, rows, key_end}));
  }
  if (mask.defined() && extra_keys > 0) mask = at::constant_pad_nd(mask, {0, extra_keys}, 0);
  return mask;
}

at::Tensor blocked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const MaskParts& mask, bool q_scaled, int64_t block_rows,
                             const BlockProbs& each) {
  const int64_t batch = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t keys = k.size(2) - mask.extra_keys;  // S: the masked keys
  if (block_rows >= t) {                             // one block: the unblocked pass, unchanged
    at::Tensor probs = attention_probs(q, k, mask.Rows(0, t, keys), q_scaled);
    if (each) probs = each(0, std::move(probs));
    return at::matmul(probs, v);
  }
  // Contiguous once, so that each block's matmuls take views (a strided K would be copied per
  // block); the output in combine_heads' layout.
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor out = at::empty({batch, t, heads, d}, q.options());
  const bool trim = !each && mask.terms.empty() && mask.causal_diagonal && mask.extra_keys == 0;
  for (int64_t begin = 0; begin < t; begin += block_rows) {
    const int64_t rows = std::min(block_rows, t - begin);
    int64_t key_end = keys;
    if (trim) key_end = std::clamp<int64_t>(begin + rows - 1 + *mask.causal_diagonal, 1, keys);
    const at::Tensor kb = key_end < keys ? kc.narrow(2, 0, key_end) : kc;
    const at::Tensor vb = key_end < keys ? vc.narrow(2, 0, key_end) : vc;
    at::Tensor probs =
        attention_probs(qc.narrow(2, begin, rows), kb, mask.Rows(begin, rows, key_end), q_scaled);
    if (each) probs = each(begin, std::move(probs));
    out.narrow(1, begin, rows).transpose(1, 2).copy_(at::matmul(probs, vb));
  }
  return out.transpose(1, 2);
}

}  // namespace mha
