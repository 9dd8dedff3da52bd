#include "kv/kv_quant.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

namespace mha::internal {
namespace {

constexpr float kInt8Levels = 255.0f;  // max - min spread over the 256 codes
constexpr float kInt8Middle = 128.0f;  // zero = min + 128 * scale: code -128 is min
#if MHA_HAS_FP8
constexpr float kFp8Max = 448.0f;  // the largest finite float8 e4m3fn
#endif

// round((x - zero) / scale) clamped to [-128, 127], as EncodeInt8's tensor ops: the clamp first
// (the same for integer bounds), then 1.5 * 2^23 added and taken away, which rounds a float of
// magnitude < 2^22 to the nearest integer, ties to even, as at::round. A plain loop GCC vectorizes.
void Codes(const float* x, int64_t d, float zero, float scale, int8_t* q) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float safe = scale > 0.0f ? scale : 1.0f;
  for (int64_t i = 0; i < d; ++i) {
    float r = (x[i] - zero) / safe;
    r = r >= -128.0f ? r : -128.0f;  // NaN too: a broken token stays broken, never a crash
    r = r <= 127.0f ? r : 127.0f;
    q[i] = static_cast<int8_t>((r + kRound) - kRound);
  }
}

EncodedKv EncodeInt8(const at::Tensor& x) {
  const auto minmax = at::aminmax(x, -1, /*keepdim=*/true);
  const at::Tensor& lo = std::get<0>(minmax);
  const at::Tensor scale = (std::get<1>(minmax) - lo) / kInt8Levels;
  const at::Tensor zero = lo + scale * kInt8Middle;
  const at::Tensor safe = at::where(scale > 0, scale, at::ones_like(scale));
  const at::Tensor codes = ((x - zero) / safe).round().clamp(-128, 127).to(at::kChar);
  return {codes, at::cat({scale, zero}, -1)};
}

#if MHA_HAS_FP8
EncodedKv EncodeFp8(const at::Tensor& x) {
  const at::Tensor scale = x.abs().amax(-1, /*keepdim=*/true) / kFp8Max;
  const at::Tensor safe = at::where(scale > 0, scale, at::ones_like(scale));
  const at::Tensor codes = (x / safe).clamp(-kFp8Max, kFp8Max).to(at::kFloat8_e4m3fn);
  return {codes, at::cat({scale, at::zeros_like(scale)}, -1)};
}
#endif

}  // namespace

void QuantizeTokenInt8(const float* x, int64_t heads, int64_t d, int8_t* q, float* scales) {
  for (int64_t h = 0; h < heads; ++h, x += d, q += d, scales += 2) {
    const auto [lo, hi] = std::minmax_element(x, x + d);
    const float scale = (*hi - *lo) / kInt8Levels;
    const float zero = *lo + scale * kInt8Middle;
    Codes(x, d, zero, scale, q);
    scales[0] = scale;
    scales[1] = zero;
  }
}

EncodedKv EncodeKv(const at::Tensor& x, at::ScalarType storage) {
  if (storage == at::kChar) return EncodeInt8(x.to(at::kFloat));
#if MHA_HAS_FP8
  if (storage == at::kFloat8_e4m3fn) return EncodeFp8(x.to(at::kFloat));
#endif
  return {x.to(storage), at::Tensor()};
}

at::Tensor DecodeKv(const at::Tensor& codes, const at::Tensor& scales, at::ScalarType out) {
  if (!scales.defined()) return codes.to(out);
  return at::addcmul(scales.narrow(-1, 1, 1), codes.to(at::kFloat), scales.narrow(-1, 0, 1))
      .to(out);
}

StatusOr<at::ScalarType> KvStorageType(KvCacheDtype dtype, at::ScalarType compute, bool on_cuda) {
  switch (dtype) {
    case KvCacheDtype::kModel:
      return compute;
    case KvCacheDtype::kFloat32:
      return at::kFloat;
    case KvCacheDtype::kBFloat16:
      return at::kBFloat16;
    case KvCacheDtype::kFloat16:
      return at::kHalf;
    case KvCacheDtype::kInt8:
      return at::kChar;
    case KvCacheDtype::kFp8E4m3:
      break;
  }
#if MHA_HAS_FP8
  if (on_cuda) return at::kFloat8_e4m3fn;
  return FailedPrecondition(
      "KV cache dtype fp8_e4m3: the pool is on the CPU, and float8 caches are for CUDA devices "
      "(int8 is the CPU's one-byte cache)");
#else
  static_cast<void>(on_cuda);
  return FailedPrecondition(std::string("KV cache dtype fp8_e4m3: this build's LibTorch ") +
                            TORCH_VERSION +
                            " has no float8_e4m3fn dtype (LibTorch 2.1 or later, on a CUDA "
                            "device; int8 is the one-byte cache here)");
#endif
}

KvCacheDtype KvDtypeOf(at::ScalarType storage) {
  switch (storage) {
    case at::kFloat:
      return KvCacheDtype::kFloat32;
    case at::kBFloat16:
      return KvCacheDtype::kBFloat16;
    case at::kHalf:
      return KvCacheDtype::kFloat16;
    case at::kChar:
      return KvCacheDtype::kInt8;
    default:
      break;
  }
#if MHA_HAS_FP8
  if (storage == at::kFloat8_e4m3fn) return KvCacheDtype::kFp8E4m3;
#endif
  return KvCacheDtype::kModel;
}

}  // namespace mha::internal
