// The colour scales and numbers of mha-client's pictures (client/plot/colour.h): the scales' ends
// and NaN, round ticks inside the range, tick and value texts.
#include "client/plot/colour.h"

#include <gtest/gtest.h>

#include <cmath>

#include "plot_test_util.h"

namespace mha::testing {
namespace colour_test {

using plot::ColourScale;

TEST(ColourScale, EndsAreTheMapsEndsAndNanIsGrey) {
  const ColourScale weights{ColourScale::kViridis, 0.0, 0.5, "w"};
  EXPECT_EQ(Bytes(weights.At(0.0)), (std::array<int, 3>{68, 1, 84}));
  EXPECT_EQ(Bytes(weights.At(0.5)), (std::array<int, 3>{253, 231, 37}));
  EXPECT_EQ(Bytes(weights.At(9.0)), Bytes(weights.At(0.5)));  // clamped
  EXPECT_EQ(Bytes(weights.At(NAN)), Bytes(plot::kNanColour));
  const ColourScale correlation{ColourScale::kDiverging, -1.0, 1.0, "c"};
  EXPECT_EQ(Bytes(correlation.At(-1.0)), (std::array<int, 3>{33, 102, 172}));
  EXPECT_EQ(Bytes(correlation.At(0.0)), (std::array<int, 3>{247, 247, 247}));
  EXPECT_EQ(Bytes(correlation.At(1.0)), (std::array<int, 3>{178, 24, 43}));
}

TEST(NiceTicks, RoundStepsInsideTheRange) {
  const std::vector<double> fifths = plot::NiceTicks(0, 1, 6);
  ASSERT_EQ(fifths.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(fifths[i], 0.2 * i, 1e-12);
  const std::vector<double> ticks = plot::NiceTicks(-1, 1, 5);
  ASSERT_EQ(ticks.size(), 5u);
  EXPECT_EQ(ticks[2], 0.0);
  for (double t : plot::NiceTicks(0.013, 0.377, 8)) {
    EXPECT_GE(t, 0.013);
    EXPECT_LE(t, 0.377);
  }
  EXPECT_EQ(plot::NiceTicks(3, 3, 6), (std::vector<double>{3}));
}

TEST(Numbers, TicksHaveTheirStepsDecimalsAndValuesThreeDigits) {
  EXPECT_EQ(plot::TickText(0.25, 0.05), "0.25");
  EXPECT_EQ(plot::TickText(10, 5), "10");
  EXPECT_EQ(plot::TickText(-0.001, 0.01), "0.00");  // never "-0.00"
  EXPECT_EQ(plot::TickText(-0.5, 0.5), "-0.5");
  EXPECT_EQ(plot::ValueText(0.25312), "0.253");
  EXPECT_EQ(plot::ValueText(2386.4), "2386");
  EXPECT_EQ(plot::ValueText(7.0), "7");
}

}  // namespace colour_test
}  // namespace mha::testing
