#include "mha/attention_blocks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "mha/attention_ops.h"
#include "mha/options.h"
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

MaskParts MaskParts::Slice(int64_t b, int64_t h) const {
  MaskParts one = *this;
  for (at::Tensor& term : one.terms) {
    if (term.size(0) > 1) term = term.narrow(0, b, 1);
    if (term.size(1) > 1) term = term.narrow(1, h, 1);
  }
  return one;
}

namespace {

// Blocks of `block_rows` rows of contiguous q [B, H, T, D] over k, v [B, H, S', D], every batch
// row and head together (their probabilities go through `each`), each block's output written into
// `out` [B, T, H, D].
void AttendRowBlocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const MaskParts& mask, bool q_scaled, int64_t block_rows,
                     const BlockProbs& each, const at::Tensor& out) {
  const int64_t t = q.size(2), keys = k.size(2) - mask.extra_keys;
  for (int64_t begin = 0; begin < t; begin += block_rows) {
    const int64_t rows = std::min(block_rows, t - begin);
    const at::Tensor probs = each(begin, attention_probs(q.narrow(2, begin, rows), k,
                                                         mask.Rows(begin, rows, keys), q_scaled));
    out.narrow(1, begin, rows).transpose(1, 2).copy_(at::matmul(probs, v));
  }
}

// Blocks of `block_rows` rows of one batch row and head at a time ([T, D] matrices); the blocks
// outside, so that a mask the same for every batch row and head (causality, a [T, S] attn_mask)
// is built once per block, not once per head.
void AttendHeadBlocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const MaskParts& mask, bool q_scaled, int64_t block_rows,
                      const at::Tensor& out) {
  const int64_t batch = q.size(0), heads = q.size(1), t = q.size(2);
  const int64_t keys = k.size(2) - mask.extra_keys;
  const bool trim = mask.terms.empty() && mask.causal_diagonal && mask.extra_keys == 0;
  const bool shared = std::all_of(mask.terms.begin(), mask.terms.end(), [](const at::Tensor& m) {
    return m.size(0) == 1 && m.size(1) == 1;
  });
  for (int64_t begin = 0; begin < t; begin += block_rows) {
    const int64_t rows = std::min(block_rows, t - begin);
    int64_t key_end = keys;
    if (trim) key_end = std::clamp<int64_t>(begin + rows - 1 + *mask.causal_diagonal, 1, keys);
    const int64_t width = key_end + mask.extra_keys;
    auto flat = [&](const at::Tensor& m) {  // [1, 1, rows or 1, width] -> 2-d
      return m.defined() ? m.reshape({m.size(2), width}) : m;
    };
    const at::Tensor block_mask = shared ? flat(mask.Rows(begin, rows, key_end)) : at::Tensor();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const at::Tensor m =
            shared ? block_mask : flat(mask.Slice(b, h).Rows(begin, rows, key_end));
        const at::Tensor kh = k[b][h], vh = v[b][h];  // [S', D]
        const at::Tensor kb = key_end < keys ? kh.narrow(0, 0, key_end) : kh;
        const at::Tensor vb = key_end < keys ? vh.narrow(0, 0, key_end) : vh;
        const at::Tensor probs = attention_probs(q[b][h].narrow(0, begin, rows), kb, m, q_scaled);
        out[b].narrow(0, begin, rows).select(1, h).copy_(at::matmul(probs, vb));
      }
    }
  }
}

}  // namespace

at::Tensor blocked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const MaskParts& mask, bool q_scaled, int64_t block_bytes,
                             const BlockProbs& each) {
  const int64_t batch = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t keys = k.size(2), element = static_cast<int64_t>(q.element_size());
  const int64_t block_rows = AttentionBlockRows(batch, heads, t, keys, element, block_bytes);
  if (block_rows >= t) {  // one block: the unblocked pass, unchanged
    at::Tensor probs = attention_probs(q, k, mask.Rows(0, t, keys - mask.extra_keys), q_scaled);
    if (each) probs = each(0, std::move(probs));
    return at::matmul(probs, v);
  }
  // Contiguous once, so that each block's matmuls take views (a strided K would be copied per
  // block); the output in combine_heads' layout.
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor out = at::empty({batch, t, heads, d}, q.options());
  if (each) {  // the probabilities of every batch row and head, block by block
    AttendRowBlocks(qc, kc, vc, mask, q_scaled, block_rows, each, out);
    return out.transpose(1, 2);
  }
  // Output only: one batch row and head at a time, so that a block of the same bytes has H * B
  // times the rows (each block reads all of K and V: more rows per block, fewer passes over them).
  AttendHeadBlocks(qc, kc, vc, mask, q_scaled,
                   AttentionBlockRows(1, 1, t, keys, element, block_bytes), out);
  return out.transpose(1, 2);
}

}  // namespace mha
