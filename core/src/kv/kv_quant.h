// Private to mha_core: how a KV block pool's stores encode keys and values (mha/kv_cache_dtype.h)
// and decode them for the readers that gather (KvCache::Keys / Values, KvBatch::Gather). The CPU
// paged kernel decodes where it reads (attention/kv_pages.h), with the same formulas.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#include <cstdint>

#include "mha/kv_cache_dtype.h"

// LibTorch has float8 e4m3 from 2.1 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define MHA_HAS_FP8 1
#else
#define MHA_HAS_FP8 0
#endif

namespace mha::internal {

// One token's `heads` rows of `d` floats (x, contiguous) into int8 codes (q, contiguous) and a
// (scale, zero) pair per head (scales, 2 * heads floats): the formulas of mha/kv_cache_dtype.h.
// Equal, bit for bit, to EncodeKv's tensor ops.
void QuantizeTokenInt8(const float* x, int64_t heads, int64_t d, int8_t* q, float* scales);

// What a store holds for x [N, H, D] (any floating dtype and device): `codes` [N, H, D] in
// `storage` (the pool's scalar type), `scales` [N, H, 2] float32 for a scaled storage (int8,
// float8), undefined otherwise.
struct EncodedKv {
  at::Tensor codes, scales;
};
EncodedKv EncodeKv(const at::Tensor& x, at::ScalarType storage);

// codes [..., H, D] (with scales [..., H, 2] when scaled) as values in `out`.
at::Tensor DecodeKv(const at::Tensor& codes, const at::Tensor& scales, at::ScalarType out);

// The scalar type a store of `dtype` holds for a model computing in `compute`; FAILED_PRECONDITION
// naming why for fp8_e4m3 without LibTorch's float8 or off a CUDA device.
StatusOr<at::ScalarType> KvStorageType(KvCacheDtype dtype, at::ScalarType compute, bool on_cuda);
// The dtype a store of `storage` is (kModel for a type without a name of its own: float64).
KvCacheDtype KvDtypeOf(at::ScalarType storage);

}  // namespace mha::internal
