// LlamaAttentionStack (mha/llama_stack.h): the stateless causal forward of every layer against
// the PyTorch reference of Hugging Face's LlamaAttention (tests/fixtures/llama, written by
// scripts/fixtures/llama_reference.py): GQA ratios 1, 4 and H (MQA), attention_bias with a given
// head_dim, weights stored as BF16; half precision within docs/afd.md's bound; CUDA when present.
#include "mha/llama_stack.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "llama_test_util.h"
#include "test_util.h"

namespace mha {
namespace llama_stack_test {

using testing::Contains;
using testing::kFp32Tolerance;
using testing::LoadLlamaCase;
using testing::LoadLlamaStack;
using testing::TensorsNear;

using CaseOnDevice = std::tuple<std::string, std::string>;  // fixture case, device

class LlamaStackFixtureTest : public ::testing::TestWithParam<CaseOnDevice> {};

TEST_P(LlamaStackFixtureTest, EveryLayerEqualsTorchReference) {
  const auto& [name, device] = GetParam();
  const testing::LlamaCase c = LoadLlamaCase(name);
  auto stack = LoadLlamaStack(c, device);
  ASSERT_NE(stack, nullptr);
  ASSERT_EQ(stack->num_layers(), 2);
  const at::Tensor& input = c.Io("input");
  for (int64_t layer = 0; layer < stack->num_layers(); ++layer) {
    at::Tensor out;
    Status s = stack->Forward(layer, input, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out.scalar_type(), at::kFloat);
    EXPECT_TRUE(out.is_cpu());  // host in, host out
    EXPECT_TRUE(TensorsNear(out, c.Io("output." + std::to_string(layer)), kFp32Tolerance))
        << name << " layer " << layer;
  }
  // Causality: the first rows of a shorter input are the same rows of the full forward.
  at::Tensor head;
  ASSERT_TRUE(stack->Forward(1, input.narrow(1, 0, 3), &head).ok());
  EXPECT_TRUE(TensorsNear(head, c.Io("output.1").narrow(1, 0, 3), kFp32Tolerance));
}

std::vector<CaseOnDevice> FixtureCases() {
  std::vector<CaseOnDevice> cases;
  for (const std::string& device : testing::TestDevices()) {
    // mha_ratio1: H = KV; gqa_ratio4: 4:1; mqa: KV = 1; bias_head_dim: biases, H*D != E.
    for (const std::string& name : testing::LlamaCaseNames("stateless")) {
      cases.emplace_back(name, device);
    }
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<CaseOnDevice>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaStackFixtureTest, ::testing::ValuesIn(FixtureCases()),
                         CaseName);

TEST(LlamaStackFixtures, TheGqaRatiosAreCovered) {
  std::vector<int64_t> ratios;
  for (const std::string& name : testing::LlamaCaseNames("stateless")) {
    auto config = ReadLlamaConfig(testing::FixturePath("llama/" + name + "/config.json"));
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    ratios.push_back(config->group_size());
    if (config->num_key_value_heads == 1) ratios.push_back(-1);  // MQA: ratio H
  }
  for (int64_t want : {int64_t{1}, int64_t{4}, int64_t{-1}}) {
    EXPECT_NE(std::find(ratios.begin(), ratios.end(), want), ratios.end()) << want;
  }
}

using HalfCase = std::tuple<DType, std::string, std::string>;  // dtype, device, case

class LlamaStackHalfTest : public ::testing::TestWithParam<HalfCase> {};

// Half precision against the float32 reference: norm-wise relative error within
// kLlamaHalfRelTolerance (llama_test_util.h). Where the device
// lacks the kernels (LibTorch 1.13 CPU float16) the stack computes in float32 and says so.
TEST_P(LlamaStackHalfTest, CloseToTheReference) {
  const auto& [dtype, device, name] = GetParam();
  const testing::LlamaCase c = LoadLlamaCase(name);
  auto stack = LoadLlamaStack(c, device, dtype);
  ASSERT_NE(stack, nullptr);
  EXPECT_EQ(stack->dtype(), dtype);
  for (int64_t layer = 0; layer < stack->num_layers(); ++layer) {
    at::Tensor out;
    ASSERT_TRUE(stack->Forward(layer, c.Io("input"), &out).ok());
    EXPECT_EQ(out.scalar_type(), dtype == DType::kFloat16 ? at::kHalf : at::kBFloat16);
    const double error = testing::RelativeError(out, c.Io("output." + std::to_string(layer)));
    EXPECT_LE(error, testing::kLlamaHalfRelTolerance)
        << DTypeName(dtype) << " on " << device << " computing in "
        << DTypeName(stack->compute_dtype()) << ", layer " << layer;
    RecordProperty(name + "_" + DTypeName(dtype) + "_layer" + std::to_string(layer),
                   ::testing::PrintToString(error));
  }
}

std::vector<HalfCase> HalfCases() {
  std::vector<HalfCase> cases;
  for (const std::string& device : testing::TestDevices()) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (const char* name : {"gqa_ratio4", "bias_head_dim"}) {
        cases.emplace_back(dtype, device, name);
      }
    }
  }
  return cases;
}

std::string HalfName(const ::testing::TestParamInfo<HalfCase>& info) {
  return std::string(DTypeName(std::get<0>(info.param))) + "_" + std::get<1>(info.param) + "_" +
         std::get<2>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaStackHalfTest, ::testing::ValuesIn(HalfCases()), HalfName);

// A batch whose scores [B, KV, group * T, S] pass the core's block budget (16 rows of T=128, 8
// query heads: 8 MiB > kDefaultAttentionBlockBytes) runs blocked, one query group at a time
// (mha/attention_blocks.h); each row equals its own unblocked forward.
TEST(LlamaStack, ABlockedPrefillEqualsEachRowAlone) {
  const testing::LlamaCase c = LoadLlamaCase("gqa_ratio4");
  auto stack = LoadLlamaStack(c, "cpu");
  ASSERT_NE(stack, nullptr);
  const int64_t rows = 16, t = 128, e = c.Io("input").size(2);
  at::manual_seed(11);
  const at::Tensor input = at::randn({rows, t, e});
  at::Tensor all;
  ASSERT_TRUE(stack->Forward(0, input, &all).ok());
  for (int64_t r : {int64_t{0}, int64_t{7}, rows - 1}) {
    at::Tensor one;
    ASSERT_TRUE(stack->Forward(0, input.narrow(0, r, 1), &one).ok());
    EXPECT_TRUE(TensorsNear(all.narrow(0, r, 1), one, kFp32Tolerance)) << "row " << r;
  }
}

TEST(LlamaStack, ForwardRefusesBadLayersAndShapes) {
  auto stack = LoadLlamaStack(LoadLlamaCase("gqa_ratio4"));
  ASSERT_NE(stack, nullptr);
  at::Tensor out;
  Status s = stack->Forward(2, at::zeros({1, 2, 64}), &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "layer 2 out of range: the model has 2 layers (0 .. 1)"));
  EXPECT_TRUE(Contains(stack->Forward(-1, at::zeros({1, 2, 64}), &out).message(), "layer -1"));
  s = stack->Forward(0, at::zeros({2, 9, 32}), &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(),
                       "hidden: expected floating [B >= 1, T >= 1, 64] (batch, "
                       "tokens, hidden_size), got [2, 9, 32] Float"));
  EXPECT_TRUE(Contains(stack->Forward(0, at::zeros({9, 64}), &out).message(), "got [9, 64]"));
  EXPECT_TRUE(Contains(stack->Forward(0, at::zeros({1, 2, 64}, at::kLong), &out).message(),
                       "got [1, 2, 64] Long"));
  EXPECT_TRUE(Contains(stack->Forward(0, at::Tensor(), &out).message(), "got none"));
}

TEST(LlamaStack, CreateRefusesUnknownDevicesAndBadCheckpoints) {
  LlamaStackOptions options;
  options.path = testing::FixturePath("llama/mqa");
  options.device = "tpu";
  EXPECT_EQ(LlamaAttentionStack::Create(options).status().code(), StatusCode::kInvalidArgument);
  if (!at::hasCUDA()) {
    options.device = "cuda";
    auto cuda = LlamaAttentionStack::Create(options);
    EXPECT_EQ(cuda.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(cuda.status().message(), "no CUDA device"));
  }
  options.device = "cpu";
  options.path = testing::FixturePath("llama/nonexistent");
  EXPECT_EQ(LlamaAttentionStack::Create(options).status().code(), StatusCode::kNotFound);
}

TEST(LlamaStack, KvLayoutHoldsKeyValueHeadsOnly) {
  auto stack = LoadLlamaStack(LoadLlamaCase("gqa_ratio4"));
  ASSERT_NE(stack, nullptr);
  const KvLayout layout = stack->kv_layout();
  EXPECT_EQ(layout.heads, 2);
  EXPECT_EQ(layout.head_dim, 8);
  EXPECT_EQ(layout.dtype, at::kFloat);
  auto pool = stack->CreateKvPool(KvPoolOptions{int64_t{1} << 20, 16});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ((*pool)->bytes_per_token(), 2 * 2 * 8 * 4);  // 2 * KV * D * 4: a quarter of 2 * E * 4
  EXPECT_EQ((*pool)->total_blocks(), (int64_t{1} << 20) / (16 * 128));
  auto none = stack->CreateKvPool(KvPoolOptions{100, 16});
  EXPECT_TRUE(
      Contains(none.status().message(),
               "--kv-cache-bytes 100 holds no block: one block of 16 tokens takes 2048 "
               "bytes (2 * 2 KV heads * head_dim 8 * 4 bytes per token, KV cache dtype fp32)"));
  // q, k, v, o of 2 layers: 64*64 + 2 * 16*64 + 64*64 each.
  EXPECT_EQ(stack->parameter_count(), 2 * (64 * 64 * 2 + 2 * 16 * 64));
}

}  // namespace llama_stack_test
}  // namespace mha
