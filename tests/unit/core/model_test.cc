// Forward pass against PyTorch: every fixture case from scripts/fixtures/gen_fixtures.py, through
// the loader and MhaModel, on CPU (and CUDA where this build has it).
#include "mha/model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace mha {
namespace model_test {

using testing::kFp32Tolerance;
using testing::LoadCaseModel;
using testing::TensorsNear;

constexpr double kHalfRelTolerance = 1e-2;

class FixtureParityTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(FixtureParityTest, MatchesPyTorch) {
  const auto& [name, device] = GetParam();
  auto c = testing::LoadFixtureCase(name);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto model = LoadCaseModel(*c, device);
  ASSERT_NE(model, nullptr);

  ForwardOutputs out;
  ASSERT_TRUE(model->Forward(c->inputs, &out).ok());
  EXPECT_TRUE(TensorsNear(out.output, c->expected_output, kFp32Tolerance)) << "output";
  if (c->inputs.need_weights) {
    EXPECT_TRUE(TensorsNear(out.attn_weights, c->expected_weights, kFp32Tolerance)) << "weights";
  } else {
    EXPECT_FALSE(out.attn_weights.defined());
  }

  // The other attention path (fused kernel vs explicit softmax) gives the same output.
  ForwardInputs other = c->inputs;
  other.need_weights = !other.need_weights;
  ForwardOutputs other_out;
  ASSERT_TRUE(model->Forward(other, &other_out).ok());
  EXPECT_TRUE(TensorsNear(other_out.output, c->expected_output, kFp32Tolerance))
      << "need_weights=" << other.need_weights;
}

std::vector<std::tuple<std::string, std::string>> AllCases() {
  std::vector<std::tuple<std::string, std::string>> cases;
  for (const auto& device : testing::TestDevices()) {
    for (const auto& name : testing::FixtureCaseNames()) cases.emplace_back(name, device);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureParityTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

TEST(FixtureIndexTest, HasTheCasesTheIssueNames) {
  auto names = testing::FixtureCaseNames();
  ASSERT_GE(names.size(), 25u) << "tests/fixtures/cases/index.json missing or short";
  for (const char* must : {"self_basic", "cross_attention", "kdim_vdim", "add_bias_kv",
                           "add_zero_attn", "kpm_float", "attn_mask_3d_bool", "causal_kpm",
                           "format_torchscript", "layout_fused_qkv", "prefix_in_checkpoint"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), must), names.end()) << must;
  }
}

// fp16 / bf16 against the fp32 reference: norm-wise relative error <= 1e-2 (see RelativeError).
// Where the device lacks the half-precision kernels (LibTorch 1.13 CPU float16), the model computes
// in float32 and says so.
class HalfPrecisionTest : public ::testing::TestWithParam<std::tuple<DType, std::string>> {};

TEST_P(HalfPrecisionTest, CloseToFp32Reference) {
  const auto& [dtype, device] = GetParam();
  auto c = testing::LoadFixtureCase("larger_e64");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto model = LoadCaseModel(*c, device, dtype);
  ASSERT_NE(model, nullptr);
  ForwardOutputs out;
  for (bool need_weights : {true, false}) {
    ForwardInputs in = c->inputs;
    in.need_weights = need_weights;
    ASSERT_TRUE(model->Forward(in, &out).ok());
    EXPECT_EQ(out.output.scalar_type(), dtype == DType::kFloat16 ? at::kHalf : at::kBFloat16);
    EXPECT_LE(testing::RelativeError(out.output, c->expected_output), kHalfRelTolerance)
        << DTypeName(dtype) << " on " << device << " computing in "
        << DTypeName(model->compute_dtype()) << ", need_weights=" << need_weights;
    if (need_weights) {
      EXPECT_LE(testing::RelativeError(out.attn_weights, c->expected_weights), kHalfRelTolerance);
    }
  }
}

std::vector<std::tuple<DType, std::string>> HalfCases() {
  std::vector<std::tuple<DType, std::string>> cases;
  for (const auto& device : testing::TestDevices()) {
    cases.emplace_back(DType::kFloat16, device);
    cases.emplace_back(DType::kBFloat16, device);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfPrecisionTest, ::testing::ValuesIn(HalfCases()),
                         [](const auto& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_" +
                                  std::get<1>(info.param);
                         });

}  // namespace model_test
}  // namespace mha
