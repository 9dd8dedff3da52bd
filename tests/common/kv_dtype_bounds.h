// The bound the KV dtype tests hold a step's output to: its norm-wise relative error against the
// same step over an fp32 cache, per cache dtype, on the PyTorch fixtures (the worst step measured
// by bench/kv_dtype_accuracy.cc is well under these).
#pragma once

#include "mha/kv_cache_dtype.h"

namespace mha::testing {

inline double KvDtypeStepBound(KvCacheDtype dtype) {
  switch (dtype) {
    case KvCacheDtype::kBFloat16:
      return 5e-3;
    case KvCacheDtype::kFloat16:
      return 1e-3;
    case KvCacheDtype::kInt8:
      return 2e-2;
    default:
      return 1e-6;
  }
}

}  // namespace mha::testing
