// mha/half.h against c10::Half and c10::BFloat16: every 16-bit pattern back to float, and float
// to bits at every value, every midpoint between neighbours (the ties), a float either side of
// each midpoint, the special values and a million random floats.
#include "mha/half.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace mha {
namespace half_test {

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

// Floats around which rounding to 16 bits can go wrong: the values, the midpoints between
// neighbours and one ulp either side of them, for both signs; the specials.
std::vector<float> Probes(float (*to_float)(uint16_t)) {
  std::vector<float> probes = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               -std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::min()};
  for (uint32_t b = 0; b < 0x7FFF; ++b) {
    const float lo = to_float(static_cast<uint16_t>(b));
    const float hi = to_float(static_cast<uint16_t>(b + 1));
    if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    for (float f : {lo, mid, FromBits(Bits(mid) - 1), FromBits(Bits(mid) + 1)}) {
      probes.push_back(f);
      probes.push_back(-f);
    }
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1000000; ++i) probes.push_back(FromBits(any(gen)));
  return probes;
}

TEST(Half, EveryBitPatternToFloatMatchesC10) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float ours = HalfBitsToFloat(bits);
    const float theirs = static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(ours)) << std::hex << b;
    } else {
      ASSERT_EQ(Bits(ours), Bits(theirs)) << std::hex << b;
    }
  }
}

TEST(Half, FloatToBitsMatchesC10AtValuesTiesAndRandomFloats) {
  const std::vector<float> probes = Probes(HalfBitsToFloat);
  ASSERT_GT(probes.size(), 1000000u);
  for (float f : probes) {
    ASSERT_EQ(FloatToHalfBits(f), c10::Half(f).x) << "float bits " << std::hex << Bits(f);
  }
}

TEST(BFloat16, EveryBitPatternToFloatMatchesC10) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float ours = BFloat16BitsToFloat(bits);
    const float theirs = static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()));
    ASSERT_EQ(Bits(ours), Bits(theirs)) << std::hex << b;
  }
}

TEST(BFloat16, FloatToBitsMatchesC10AtValuesTiesAndRandomFloats) {
  for (float f : Probes(BFloat16BitsToFloat)) {
    ASSERT_EQ(FloatToBFloat16Bits(f), c10::BFloat16(f).x) << "float bits " << std::hex << Bits(f);
  }
}

}  // namespace half_test
}  // namespace mha
