// Several sessions' caches as one batch (DecodeSteps' padded path, mha/decode.h): the new tokens of
// every cache written with one index op per store, every row's keys and values gathered with one,
// whatever the number of sessions. On a GPU that is one host-to-device copy of slot or block ids
// per call where per-session calls (KvCache::Append, Keys, Values) make one per session, and each
// such copy waits for the stream. The same ops on the CPU (where KvCache::Append copies rows
// with memcpy instead), so that the CPU's tests run the GPU's code.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <vector>

#include "mha/kv_cache.h"

namespace mha {

struct KvBatch {
  // Appends k, v ([sum of the caches' rows, T, H * head_dim], the caches' rows in order) at each
  // cache's positions length() .. length() + T - 1. Every cache must be of one pool and have had
  // Reserve(T). Throws on misuse (c10::Error; std::out_of_range without the Reserve), with no
  // cache's length changed.
  static void Append(const std::vector<KvCache*>& caches, const at::Tensor& k, const at::Tensor& v);

  // Every row's keys and values padded to the longest cache: [sum of rows, H, longest, head_dim],
  // zero at and past a row's own length (so that a masked position multiplies a zero, never the
  // stale contents of a page). lengths: [sum of rows] int64 on the pool's device.
  struct Padded {
    at::Tensor keys, values, lengths;
    int64_t longest = 0;
  };
  static Padded Gather(const std::vector<const KvCache*>& caches);

  // The additive mask of a padded attention over `keys` >= padded.longest keys (extra keys past
  // the longest, such as add_bias_kv's, stay visible): [rows, 1, 1, keys], -inf at and past each
  // row's length, in `options`' dtype on its device.
  static at::Tensor PaddingMask(const Padded& padded, int64_t keys,
                                const at::TensorOptions& options);

  // Whether padding `rows` rows to `longest` tokens stays within bounds: at most twice the
  // `real` tokens, or under 64 MiB of keys and values in all at `bytes_per_token` (a short
  // session beside a long one is not padded to gigabytes).
  static bool PaddingFits(int64_t rows, int64_t longest, int64_t real, int64_t bytes_per_token);
};

}  // namespace mha
