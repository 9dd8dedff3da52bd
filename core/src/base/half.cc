#include "mha/half.h"

#include <cmath>
#include <cstring>

namespace mha {

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

uint16_t FloatToHalfBits(float value) {
  const uint32_t u = Bits(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                        // below float16's smallest normal, 2^-14
    // Subnormal (or zero): the value in units of 2^-24, rounded to nearest even by the FPU.
    const float scaled = FromBits(abs) * 16777216.0f;  // exact: a power of two
    const float rounded = std::nearbyint(scaled);      // default mode: ties to even
    return sign | static_cast<uint16_t>(rounded);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  const uint32_t mantissa_round = ((abs >> 13) & 1u) + 0xFFFu;  // ties to even
  const uint32_t rebased = abs - (112u << 23) + mantissa_round;
  return sign | static_cast<uint16_t>(rebased >> 13);
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1Fu) return FromBits(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * FromBits(0x33800000u);  // 2^-24
    return FromBits(sign | Bits(magnitude));
  }
  return FromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16Bits(float value) {
  if (std::isnan(value)) return 0x7FC0u;
  const uint32_t u = Bits(value);
  const uint32_t rounding_bias = ((u >> 16) & 1u) + 0x7FFFu;  // ties to even
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

float BFloat16BitsToFloat(uint16_t bits) { return FromBits(static_cast<uint32_t>(bits) << 16); }

}  // namespace mha
