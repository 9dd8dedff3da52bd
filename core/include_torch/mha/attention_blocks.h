// Attention over blocks of query rows (docs/core.md, "Blocked attention"): softmax(QK^T/sqrt(D) +
// mask) V with the scores of at most `block_rows` query rows alive at a time. Each row's softmax is
// independent of the others, so a block is the same computation on fewer rows, not an
// approximation. The masks are kept in parts and built block by block, so that no [T, S] tensor
// is made whole either.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace mha {

// The additive mask of one pass in parts: the terms (bool = true masked, or float additive) made
// additive and summed in their order, then the causal part, then zeros for the appended keys —
// the order, and so the values, of the masks the core built whole before.
struct MaskParts {
  std::vector<at::Tensor> terms;  // 4-d, broadcastable to [B, H, T, S]; dim 2 is T or 1, dim 3 S
  std::optional<int64_t> causal_diagonal;  // -inf at key j of query row i when j >= i + diagonal
  int64_t extra_keys = 0;                  // zero columns appended (add_bias_kv / add_zero_attn)
  at::TensorOptions options;               // the compute dtype and device

  bool empty() const { return terms.empty() && !causal_diagonal; }
  // The additive mask of query rows [begin, begin + rows) over keys [0, key_end) plus the extra
  // keys, broadcastable to [B, H, rows, key_end + extra_keys]; undefined when there is no mask.
  at::Tensor Rows(int64_t begin, int64_t rows, int64_t key_end) const;
  // The parts of batch row b and head h alone (terms narrowed where they are not broadcast).
  MaskParts Slice(int64_t b, int64_t h) const;
};

// What a block's probabilities [B, H, rows, S'] (rows from query row `begin`) go through before
// they meet V: head statistics and weights copied out, head_mask applied. Returns the
// probabilities to multiply by V.
using BlockProbs = std::function<at::Tensor(int64_t begin, at::Tensor probs)>;

// q [B, H, T, D] (already times 1/sqrt(D) when q_scaled), k and v [B, H, S', D]. Returns the
// per-head output [B, H, T, D]. The blocks (mha/options.h AttentionBlockRows, `block_bytes` of
// scores each; <= 0: one block):
// - [B, H, T, S'] within block_bytes: one block, exactly attention_probs then matmul(probs, v)
//   (the unblocked pass);
// - with `each` (the probabilities are wanted): blocks of [B, H, rows, S'];
// - without: one batch row and head at a time, blocks of [rows, S'] (H * B times the rows of the
//   same bytes: each block reads all of that head's K and V), the blocks outside the heads so that
//   a mask shared by every batch row and head is built once per block; when the mask is only
//   causal and no key is appended, a block's keys stop after its last row's last visible key (the
//   keys past it would get probability exactly 0).
// Several blocks write the output into one [B, T, H, D] buffer (so combine_heads' copy is a view).
at::Tensor blocked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const MaskParts& mask, bool q_scaled, int64_t block_bytes,
                             const BlockProbs& each = {});

}  // namespace mha
