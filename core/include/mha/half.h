// float <-> float16 / bfloat16 bits without LibTorch, bit-exact with c10::Half and c10::BFloat16
// (round to nearest, ties to even; a NaN becomes the canonical quiet NaN: float16 keeps the sign,
// bfloat16 gives 0x7FC0, as c10 does). For the wire formats that spell tensors as numbers (REST
// JSON); tests/unit/core/half_test.cc compares them with c10 over every float16/bfloat16 value,
// the midpoints between them and random floats.
#pragma once

#include <cstdint>

namespace mha {

uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(uint16_t bits);
uint16_t FloatToBFloat16Bits(float value);
float BFloat16BitsToFloat(uint16_t bits);

}  // namespace mha
