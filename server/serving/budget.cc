#include "server/serving/budget.h"

#include <initializer_list>
#include <limits>

namespace mha::serve {

int64_t SaturatingMul(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return std::numeric_limits<int64_t>::max();
  }
  return product;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

namespace {

const auto Mul = &SaturatingMul;
const auto Add = &SaturatingAdd;

int64_t AttentionWorkBytes(const PassShape& p) {
  const int64_t c = p.compute_bytes, keys = Add(p.s, p.extra_keys);
  // Projections q, k, v and their head-split copies, the attention output and W^O's output.
  const int64_t projections = Mul({p.rows, Add(Mul({3, p.t}), Mul({4, p.s})), p.embed_dim, c});
  const int64_t whole = Mul({p.rows, p.num_heads, p.t, keys, c});  // one [rows, H, t, s'] tensor
  const int64_t weights = p.need_weights ? whole : 0;
  if (p.on_device) {
    if (p.head_options) return Add(projections, Add(Mul({3, whole}), weights));
    // The fused kernel: the additive mask whole (when there is one) and its per-row statistics.
    const int64_t mask = Mul({p.rows, p.mask_heads, p.t, keys, c});
    return Add(projections, Add(mask, Mul({p.rows, p.num_heads, p.t, 4})));
  }
  // Scores, the additive mask and the softmax probabilities of one block; several blocks add the
  // contiguous q, k, v heads and the output buffer.
  const int64_t block_rows = AttentionBlockRows(p.rows, p.num_heads, p.t, keys, c, p.block_bytes);
  if (block_rows >= p.t) return Add(projections, Add(Mul({3, whole}), weights));
  const int64_t block = p.head_options
                            ? Mul({p.rows, p.num_heads, block_rows, keys, c})
                            : Mul({AttentionBlockRows(1, 1, p.t, keys, c, p.block_bytes), keys, c});
  const int64_t heads = Mul({p.rows, Add(p.t, Mul({2, p.s})), p.embed_dim, c});
  return Add(Add(projections, heads), Add(Mul({3, block}), weights));
}

}  // namespace

int64_t PassWorkBytes(const PassShape& p) {
  return Add(AttentionWorkBytes(p), Mul({p.rows, p.s, p.cache_bytes_per_key}));
}

}  // namespace mha::serve
