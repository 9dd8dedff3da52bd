// The panel GEMM of the packed pass (core/src/attention/panel_gemm.h, private to mha_core) against
// at::mm, in both its forms (AVX-512 where this CPU has it, and the 8-float form every x86-64
// runs), at sizes that reach each row tail of both tile heights, an odd number of panels, K past
// one chunk and rows past one block, with and without a bias, x's rows apart by more than K.
#include "../../../core/src/attention/panel_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <tuple>

#include "mha/runtime.h"
#include "test_util.h"

namespace mha {
namespace {

class PanelGemmTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(PanelGemmTest, MatchesMm) {
  const auto [n, k, m] = GetParam();
  at::manual_seed(3);
  const at::Tensor wide_x = at::randn({n, k + 3});
  const at::Tensor x = wide_x.narrow(1, 0, k);  // rows k + 3 floats apart
  const at::Tensor w_t = at::randn({k, m}), bias = at::randn({m});
  const at::Tensor panels = internal::PackPanels(w_t);
  const double tolerance = 1e-5 * static_cast<double>(k);  // sums of k products of N(0, 1)
  for (bool wide : {true, false}) {
    SCOPED_TRACE(wide ? "AVX-512 where the CPU has it" : "8-float form");
    internal::AllowWidePanelGemm(wide);
    for (bool with_bias : {false, true}) {
      at::Tensor c = at::full({n, m}, 7.0f);  // every element overwritten
      internal::PanelGemm(wide_x.data_ptr<float>(), k + 3, n, k, panels.data_ptr<float>(), m,
                          with_bias ? bias.data_ptr<float>() : nullptr, c.data_ptr<float>());
      const at::Tensor expected = with_bias ? at::addmm(bias, x, w_t) : at::mm(x, w_t);
      EXPECT_TRUE(testing::TensorsNear(c, expected, tolerance)) << "bias " << with_bias;
    }
  }
  internal::AllowWidePanelGemm(true);
}

// Rows 1-17 (every tail of 6- and 8-row tiles), 300 (past a block of rows at K = 1100); K 1, 5,
// 512 and 1100 (past one chunk); M 16 (one panel), 48 (odd), 64.
INSTANTIATE_TEST_SUITE_P(Sizes, PanelGemmTest,
                         ::testing::Values(std::make_tuple(1, 1, 16), std::make_tuple(2, 5, 48),
                                           std::make_tuple(3, 7, 64), std::make_tuple(4, 9, 16),
                                           std::make_tuple(5, 16, 48), std::make_tuple(6, 33, 32),
                                           std::make_tuple(7, 64, 48), std::make_tuple(9, 8, 64),
                                           std::make_tuple(10, 17, 16), std::make_tuple(11, 3, 32),
                                           std::make_tuple(12, 40, 48), std::make_tuple(13, 2, 64),
                                           std::make_tuple(14, 11, 80), std::make_tuple(15, 24, 32),
                                           std::make_tuple(17, 512, 48),
                                           std::make_tuple(8, 1100, 32),
                                           std::make_tuple(300, 1100, 48)));

// LinearT: x times w_t (+ bias) equal to addmm / mm whether it reads the panels or not (up to
// kPanelRowsAnyThreads rows at any BLAS thread count, past it at one thread), x strided or not.
TEST(LinearTTest, MatchesAddmmWithAndWithoutPanels) {
  at::manual_seed(5);
  const int64_t k = 96, m = 48;
  const at::Tensor w_t = at::randn({k, m}), bias = at::randn({m});
  const at::Tensor panels = internal::PackPanels(w_t);
  const int before = BlasThreads();
  for (int threads : {1, 2}) {
    SetBlasThreads(threads);
    for (int64_t n : {int64_t{1}, internal::kPanelRowsAnyThreads, int64_t{130}}) {
      const at::Tensor x = at::randn({n, k + 5}).narrow(1, 2, k);  // rows k + 5 floats apart
      for (bool with_bias : {false, true}) {
        const at::Tensor b = with_bias ? bias : at::Tensor();
        const at::Tensor expected = with_bias ? at::addmm(bias, x, w_t) : at::mm(x, w_t);
        for (bool with_panels : {false, true}) {
          const at::Tensor got = internal::LinearT(x, w_t, b, with_panels ? panels : at::Tensor());
          EXPECT_TRUE(testing::TensorsNear(got, expected, 1e-5 * k))
              << "threads " << threads << " rows " << n << " bias " << with_bias << " panels "
              << with_panels;
        }
      }
    }
  }
  if (before > 0) SetBlasThreads(before);
}

}  // namespace
}  // namespace mha
