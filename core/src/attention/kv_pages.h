// Private to mha_core: the paged kernel's readers of a KV page (attention/paged_kernel.cc). A
// K/V head's rows of one block, decoded into floats in L1 from the pool's cache dtype
// (mha/kv_cache_dtype.h): bfloat16 and float16 widened exactly, int8 as q * scale + zero with its
// slot's (scale, zero). float32 pages are read where they lie, without a copy. Plain loops: GCC
// vectorizes them for each of the kernel's clones (its vector-extension conversions from 8- and
// 16-bit lanes come out scalar).
#pragma once

#include <cstdint>
#include <cstring>

#include "attention/simd.h"

namespace mha::internal {

// out[i] = q[i] * scale + zero for i < d; sz = {scale, zero}.
MHA_INLINE void DecodeInt8(const int8_t* __restrict q, const float* sz, int64_t d,
                           float* __restrict out) {
  const float scale = sz[0], zero = sz[1];
  for (int64_t i = 0; i < d; ++i) out[i] = static_cast<float>(q[i]) * scale + zero;
}

// bfloat16 bits to floats: the bits are a float's upper half.
MHA_INLINE void DecodeBf16(const uint16_t* __restrict x, int64_t d, float* __restrict out) {
  for (int64_t i = 0; i < d; ++i) {
    const uint32_t bits = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

// float16 bits to floats, exactly: the exponent and mantissa shifted into a float's and scaled by
// 2^112 (the bias difference; subnormals come out right too), infinities and NaNs given the top
// exponent, the sign put back.
MHA_INLINE void DecodeHalf(const uint16_t* __restrict x, int64_t d, float* __restrict out) {
  for (int64_t i = 0; i < d; ++i) {
    const uint32_t h = x[i], em = (h & 0x7fffu) << 13;
    float f;
    std::memcpy(&f, &em, sizeof f);
    f *= 0x1p112f;
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    bits |= ((h & 0x7c00u) == 0x7c00u ? 0x7f800000u : 0u) | ((h & 0x8000u) << 16);
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

}  // namespace mha::internal
