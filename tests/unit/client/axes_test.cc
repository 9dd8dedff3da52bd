// The pieces figures are made of (client/plot/axes.h): the max-pooled view of a big matrix keeps
// each block's peak, ignores masked cells and masks a block only when all of it is; tick labels
// are spaced by round strides.
#include "client/plot/axes.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mha::testing {
namespace axes_test {

using plot::Cells;

TEST(DownsampleMax, KeepsEachBlocksPeakAndMasksOnlyWholeBlocks) {
  Cells c{5, 4, std::vector<float>(20, 0.0f), std::vector<uint8_t>(20, 0)};
  c.values[0 * 4 + 1] = 0.5f;   // block (0, 0)
  c.values[4 * 4 + 3] = 0.75f;  // block (2, 1): the last row is a block of its own
  c.values[2 * 4 + 2] = 0.9f;   // masked: its weight says nothing
  c.masked[2 * 4 + 2] = 1;
  for (int64_t k = 0; k < 2; ++k) c.masked[2 * 4 + k] = c.masked[3 * 4 + k] = 1;  // block (1, 0)
  int64_t rows = 0, cols = 0;
  const Cells d = plot::DownsampleMax(c, 3, 2, &rows, &cols);
  EXPECT_EQ(rows, 2);
  EXPECT_EQ(cols, 2);
  ASSERT_EQ(d.rows, 3);
  ASSERT_EQ(d.cols, 2);
  EXPECT_EQ(d.values[0], 0.5f);
  EXPECT_EQ(d.values[2 * 2 + 1], 0.75f);
  EXPECT_EQ(d.values[1 * 2 + 1], 0.0f);  // the 0.9 was masked
  EXPECT_EQ(d.masked, (std::vector<uint8_t>{0, 0, 1, 0, 0, 0}));
  c.values[0] = NAN;
  EXPECT_TRUE(std::isnan(plot::DownsampleMax(c, 3, 2, &rows, &cols).values[0]));
  const Cells same = plot::DownsampleMax(c, 64, 64, &rows, &cols);
  EXPECT_EQ(rows, 1);
  EXPECT_EQ(same.rows, 5);
}

TEST(LabelStride, TheSmallestRoundStrideThatKeepsLabelsApart) {
  EXPECT_EQ(plot::LabelStride(28, 12), 1);
  EXPECT_EQ(plot::LabelStride(4, 12), 5);
  EXPECT_EQ(plot::LabelStride(4, 22), 10);
  EXPECT_EQ(plot::LabelStride(0.5, 30), 100);
}

}  // namespace axes_test
}  // namespace mha::testing
