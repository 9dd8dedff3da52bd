// The working memory of one attention pass, from its shapes alone, before anything is computed:
// what every kind's estimate of a pass (a one-layer request, a stack's layer step) counts against
// --max-work-bytes (limits.h). Every product saturates instead of overflowing.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "mha/options.h"

namespace mha::serve {

// Saturating product of non-negative factors, and sum: INT64_MAX instead of an overflow.
int64_t SaturatingMul(std::initializer_list<int64_t> factors);
int64_t SaturatingAdd(int64_t a, int64_t b);

// One pass as the work estimate sees it: `rows` rows of t queries and s keys (s' = s +
// extra_keys), `compute_bytes` per element, and the attention path the core takes for it
// (docs/core.md, "Blocked attention" and "What --max-work-bytes counts").
struct PassShape {
  int64_t embed_dim = 0, num_heads = 1, extra_keys = 0, compute_bytes = 4;
  int64_t rows = 0, t = 0, s = 0;
  // The probabilities are wanted (weights, head_stats or head_mask): on the CPU blocks of every
  // row and head, on a device the whole scores. Else blocks of one row and head on the CPU (one
  // block of everything when it fits), the fused kernel on a device.
  bool head_options = false;
  bool need_weights = false;  // the pass also keeps a whole [rows, H, t, s'] copy of them
  bool on_device = false;     // a CUDA device
  int64_t mask_heads = 0;     // on a device: the whole additive mask's heads (0 none, 1, or H)
  int64_t block_bytes = kDefaultAttentionBlockBytes;  // MhaOptions::attention_block_bytes
};
// The peak working memory of the pass: projections and outputs, plus on the CPU three blocks of
// scores (scores, mask, softmax; a block's rows from AttentionBlockRows, the function the core
// uses, as mha/attention_blocks.h chooses them) and on a device either the whole scores or the
// fused kernel's mask and row statistics.
int64_t PassWorkBytes(const PassShape& pass);

}  // namespace mha::serve
