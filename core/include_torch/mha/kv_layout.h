// What one token of one sequence stores in a KV block pool (mha/kv_cache.h): `heads` keys and
// values of `head_dim` each, in `dtype` on `device`. bytes per token = 2 * heads * head_dim * dtype
// size. Apart from kv_cache.h because of its LibTorch types.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace mha {

struct KvLayout {
  int64_t heads = 0;
  int64_t head_dim = 0;
  at::ScalarType dtype = at::kFloat;
  c10::Device device{c10::kCPU};
};

}  // namespace mha
