// Private to mha_core: the paged kernel's readers of a KV page (attention/paged_kernel.cc). A
// K/V head's rows of one block, decoded into floats in L1 from the pool's cache dtype
// (mha/kv_cache_dtype.h): bfloat16 and float16 widened exactly, int8 as q * scale + zero with its
// slot's (scale, zero). float32 pages are read where they lie, without a copy.
#pragma once

#include <cstdint>

#include "attention/simd.h"
#include "mha/half.h"

namespace mha::internal {

typedef int8_t KvB8 __attribute__((vector_size(8)));
typedef uint16_t KvU8 __attribute__((vector_size(16)));
typedef uint32_t KvW8 __attribute__((vector_size(32)));

// out[i] = q[i] * scale + zero for i < d; sz = {scale, zero}.
MHA_INLINE void DecodeInt8(const int8_t* q, const float* sz, int64_t d, float* out) {
  const float scale = sz[0], zero = sz[1];
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    KvB8 b;
    __builtin_memcpy(&b, q + i, sizeof b);
    MHA_ST(out + i, __builtin_convertvector(b, V8) * scale + zero);
  }
  for (; i < d; ++i) out[i] = static_cast<float>(q[i]) * scale + zero;
}

// bfloat16 bits to floats: the bits are a float's upper half.
MHA_INLINE void DecodeBf16(const uint16_t* x, int64_t d, float* out) {
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    KvU8 h;
    __builtin_memcpy(&h, x + i, sizeof h);
    const KvW8 w = __builtin_convertvector(h, KvW8) << 16;
    V8 f;
    __builtin_memcpy(&f, &w, sizeof f);
    MHA_ST(out + i, f);
  }
  for (; i < d; ++i) out[i] = BFloat16BitsToFloat(x[i]);
}

// float16 bits to floats, exactly: the exponent and mantissa shifted into a float's and scaled by
// 2^112 (the bias difference; subnormals come out right too), infinities and NaNs given the top
// exponent, the sign put back.
MHA_INLINE void DecodeHalf(const uint16_t* x, int64_t d, float* out) {
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    KvU8 h16;
    __builtin_memcpy(&h16, x + i, sizeof h16);
    const KvW8 h = __builtin_convertvector(h16, KvW8);
    const KvW8 em = (h & 0x7fffu) << 13;
    V8 f;
    __builtin_memcpy(&f, &em, sizeof f);
    f *= 0x1p112f;
    KvW8 bits;
    __builtin_memcpy(&bits, &f, sizeof bits);
    bits |= reinterpret_cast<KvW8>((h & 0x7c00u) == 0x7c00u) & 0x7f800000u;
    bits |= (h & 0x8000u) << 16;
    __builtin_memcpy(out + i, &bits, sizeof bits);
  }
  for (; i < d; ++i) out[i] = HalfBitsToFloat(x[i]);
}

}  // namespace mha::internal
