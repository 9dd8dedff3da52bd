// StandInFfn (client/stand_in_ffn.h), the FFN side of mha-client afd: deterministic per seed, rows
// normalised to a root mean square of 1, and Apply adding W rms_norm(h) as a naive product does.
#include "client/bench/stand_in_ffn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mha::client {
namespace stand_in_ffn_test {

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * static_cast<float>(i % 7 - 3);
  return v;
}

TEST(StandInFfn, RowsAreNormalisedToUnitRootMeanSquare) {
  const StandInFfn ffn(16, 1);
  std::vector<float> x = Ramp(3 * 16, 2.5f), y(x.size());
  ffn.RmsNorm(x.data(), y.data(), 3);
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int j = 0; j < 16; ++j) sum += static_cast<double>(y[r * 16 + j]) * y[r * 16 + j];
    EXPECT_NEAR(std::sqrt(sum / 16), 1.0, 1e-5) << "row " << r;
    EXPECT_NEAR(y[r * 16 + 1] / y[r * 16 + 2], x[r * 16 + 1] / x[r * 16 + 2], 1e-5);  // a scale
  }
}

TEST(StandInFfn, ApplyAddsTheMatrixTimesTheNormalisedRow) {
  const int64_t e = 8;
  const StandInFfn ffn(e, 7);
  std::vector<float> h = Ramp(2 * e, 0.5f), before = h, unit(h.size());
  ffn.RmsNorm(before.data(), unit.data(), 2);
  ffn.Apply(h.data(), 2);
  // W is recovered column by column from basis rows: Apply on a unit row e_k adds row k of W.
  std::vector<float> w(static_cast<size_t>(e * e));
  for (int64_t k = 0; k < e; ++k) {
    std::vector<float> basis(static_cast<size_t>(e), 0.0f);
    basis[static_cast<size_t>(k)] = std::sqrt(static_cast<float>(e));  // rms 1: unchanged by norm
    std::vector<float> out = basis;
    ffn.Apply(out.data(), 1);
    for (int64_t j = 0; j < e; ++j) {
      w[static_cast<size_t>(k * e + j)] = (out[j] - basis[j]) / basis[static_cast<size_t>(k)];
    }
  }
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t j = 0; j < e; ++j) {
      double want = before[static_cast<size_t>(r * e + j)];
      for (int64_t k = 0; k < e; ++k) want += unit[r * e + k] * w[static_cast<size_t>(k * e + j)];
      EXPECT_NEAR(h[static_cast<size_t>(r * e + j)], want, 1e-4) << r << "," << j;
    }
  }
  EXPECT_NE(h, before);
}

TEST(StandInFfn, TheSameSeedGivesTheSameMatrix) {
  std::vector<float> a = Ramp(32, 1.0f), b = a, c = a;
  StandInFfn(32, 3).Apply(a.data(), 1);
  StandInFfn(32, 3).Apply(b.data(), 1);
  StandInFfn(32, 4).Apply(c.data(), 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace stand_in_ffn_test
}  // namespace mha::client
