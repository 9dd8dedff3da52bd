// Merging requests into one forward pass and slicing the answers back: every request's answer
// must equal the same request run alone (fp32, 1e-5), with mixed lengths, bool/float masks (2D
// and 3D), causal, cross-attention, kdim/vdim, add_bias_kv/add_zero_attn, weights off/averaged/
// per head, on the PyTorch fixture models.
#include "server/serving/kinds/multihead/batch_assembly.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "batch_test_util.h"
#include "server/serving/kinds/multihead/dynamic_batcher.h"
#include "server/serving/kinds/multihead/merge/batch_merge.h"
#include "wait.h"

namespace mha::serve {
namespace batch_assembly_test {

using testing::MakeGenerator;
using testing::MakeRequest;
using testing::MaskKind;
using testing::RequestSpec;
using testing::TensorsNear;

constexpr double kTolerance = 1e-5;

// Runs `requests` merged and alone; expects equal answers.
void ExpectBatchedEqualsAlone(const MhaModel& model, const std::vector<ForwardInputs>& requests) {
  std::vector<const ForwardInputs*> pointers;
  for (const auto& r : requests) pointers.push_back(&r);
  const BatchModelInfo info = MakeBatchModelInfo(DescribeModel(model));
  MergedBatch merged = MergeInputs(pointers, info);
  ForwardOutputs out;
  const Status status = model.Forward(merged.inputs, &out);
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::vector<ForwardOutputs> split = SplitOutputs(merged, out, info);
  ASSERT_EQ(split.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    ForwardOutputs alone;
    ASSERT_TRUE(model.Forward(requests[i], &alone).ok());
    EXPECT_TRUE(TensorsNear(split[i].output, alone.output, kTolerance)) << "request " << i;
    EXPECT_EQ(split[i].attn_weights.defined(), alone.attn_weights.defined());
    if (alone.attn_weights.defined()) {
      EXPECT_TRUE(TensorsNear(split[i].attn_weights, alone.attn_weights, kTolerance))
          << "weights of request " << i;
    }
  }
}

TEST(LengthBucketTest, NarrowBucketsThatGrowWithLength) {
  EXPECT_EQ(LengthBucket(1), 8);
  EXPECT_EQ(LengthBucket(8), 8);
  EXPECT_EQ(LengthBucket(9), 16);
  EXPECT_EQ(LengthBucket(17), 24);
  EXPECT_EQ(LengthBucket(64), 64);
  EXPECT_EQ(LengthBucket(65), 80);
  EXPECT_EQ(LengthBucket(100), 112);
  EXPECT_EQ(LengthBucket(200), 224);
  EXPECT_EQ(LengthBucket(1000), 1024);
  for (int64_t n = 1; n < 5000; ++n) {
    ASSERT_GE(LengthBucket(n), n);
    ASSERT_LE(LengthBucket(n), LengthBucket(n + 1));
  }
}

TEST(GroupKeyTest, SeparatesEverythingThatChangesTheMath) {
  MhaOptions o;
  o.embed_dim = 8;
  o.num_heads = 2;
  auto gen = MakeGenerator(1);
  const ForwardInputs base = MakeRequest(o, {1, 20}, gen);
  const GroupKey key = MakeGroupKey(testing::ToHostInputs(base));
  EXPECT_EQ(key, MakeGroupKey(testing::ToHostInputs(
                     MakeRequest(o, {3, 23, 0, MaskKind::kBool, MaskKind::kFloat}, gen))))
      << "masks and batch size do not matter";
  EXPECT_NE(key, MakeGroupKey(testing::ToHostInputs(MakeRequest(o, {1, 40}, gen))))
      << "other length bucket";
  EXPECT_NE(key, MakeGroupKey(testing::ToHostInputs(MakeRequest(o, {1, 20, 20}, gen))))
      << "cross-attention";
  ForwardInputs other = base;
  other.is_causal = true;
  EXPECT_NE(key, MakeGroupKey(testing::ToHostInputs(other)));
  other = base;
  other.need_weights = true;
  EXPECT_NE(key, MakeGroupKey(testing::ToHostInputs(other)));
  ForwardInputs per_head = other;
  per_head.average_attn_weights = false;
  EXPECT_NE(MakeGroupKey(testing::ToHostInputs(other)),
            MakeGroupKey(testing::ToHostInputs(per_head)));
  other = base;
  other.average_attn_weights = false;  // irrelevant without weights
  EXPECT_EQ(key, MakeGroupKey(testing::ToHostInputs(other)));
  other = base;
  other.query = other.query.to(at::kHalf);  // host tensors carry the wire's dtypes (no double)
  EXPECT_NE(key, MakeGroupKey(testing::ToHostInputs(other))) << "query dtype";
}

TEST(CountTokensTest, RealAndPadded) {
  EXPECT_EQ(CountTokens({{1, 10, 10}, {2, 20, 20}}, false).real, 50);
  EXPECT_EQ(CountTokens({{1, 10, 10}, {2, 20, 20}}, false).padded, 60);
  EXPECT_EQ(CountTokens({{1, 10, 5}, {1, 4, 7}}, true).real, 26);
  EXPECT_EQ(CountTokens({{1, 10, 5}, {1, 4, 7}}, true).padded, 34);
}

// (fixture model, cross-attention, causal, weights mode: 0 none, 1 averaged, 2 per head)
class BatchedEqualsAloneTest
    : public ::testing::TestWithParam<std::tuple<std::string, bool, bool, int>> {};

TEST_P(BatchedEqualsAloneTest, MixedLengthsAndMasks) {
  const auto& [case_name, cross, causal, weights] = GetParam();
  auto model = testing::LoadFixtureModel(case_name);
  ASSERT_NE(model, nullptr);
  const MhaOptions& o = model->options();
  auto gen = MakeGenerator(42);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> length(1, 13), rows(1, 3), mask_kind(0, 4), kpm_kind(0, 2);
  for (int round = 0; round < 3; ++round) {
    std::vector<ForwardInputs> requests;
    for (int i = 0; i < 6; ++i) {
      RequestSpec spec;
      spec.b = rows(rng);
      spec.t = length(rng);
      spec.s = cross ? length(rng) : 0;
      spec.kpm = static_cast<MaskKind>(kpm_kind(rng));
      spec.attn = static_cast<MaskKind>(mask_kind(rng));
      spec.causal = causal;
      spec.need_weights = weights > 0;
      spec.average = weights == 1;
      requests.push_back(MakeRequest(o, spec, gen));
    }
    ExpectBatchedEqualsAlone(*model, requests);
  }
}

std::string CaseName(const ::testing::TestParamInfo<BatchedEqualsAloneTest::ParamType>& info) {
  return std::get<0>(info.param) + (std::get<1>(info.param) ? "_cross" : "_self") +
         (std::get<2>(info.param) ? "_causal" : "") + "_weights" +
         std::to_string(std::get<3>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, BatchedEqualsAloneTest,
    ::testing::Combine(::testing::Values("self_basic", "self_nobias", "add_bias_kv",
                                         "add_zero_attn", "bias_kv_zero_attn_kpm", "larger_e64"),
                       ::testing::Bool(), ::testing::Bool(), ::testing::Values(0, 1, 2)),
    CaseName);
// kdim != vdim != embed_dim: cross-attention only.
INSTANTIATE_TEST_SUITE_P(KdimVdim, BatchedEqualsAloneTest,
                         ::testing::Combine(::testing::Values("kdim_vdim", "kdim_vdim_nobias"),
                                            ::testing::Values(true), ::testing::Bool(),
                                            ::testing::Values(0, 1, 2)),
                         CaseName);

TEST(BatchAssemblyTest, SameShapesWithoutMasksNeedNoMask) {
  auto model = testing::LoadFixtureModel("self_basic");
  ASSERT_NE(model, nullptr);
  auto gen = MakeGenerator(3);
  std::vector<ForwardInputs> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(MakeRequest(model->options(), {2, 9}, gen));
  std::vector<const ForwardInputs*> pointers;
  for (const auto& r : requests) pointers.push_back(&r);
  MergedBatch merged = MergeInputs(pointers, MakeBatchModelInfo(DescribeModel(*model)));
  EXPECT_FALSE(merged.inputs.key_padding_mask.defined());
  EXPECT_FALSE(merged.inputs.attn_mask.defined());
  EXPECT_EQ(merged.inputs.query.size(0), 8);
  ExpectBatchedEqualsAlone(*model, requests);
}

TEST(BatchAssemblyTest, PaddedSelfAttentionKeysAreMasked) {
  auto model = testing::LoadFixtureModel("self_basic");
  ASSERT_NE(model, nullptr);
  auto gen = MakeGenerator(4);
  std::vector<ForwardInputs> requests = {MakeRequest(model->options(), {1, 3}, gen),
                                         MakeRequest(model->options(), {1, 11}, gen)};
  std::vector<const ForwardInputs*> pointers = {&requests[0], &requests[1]};
  MergedBatch merged = MergeInputs(pointers, MakeBatchModelInfo(DescribeModel(*model)));
  ASSERT_TRUE(merged.inputs.key_padding_mask.defined());
  EXPECT_EQ(merged.t_max, 11);
  // Row 0 (T=3): keys 3.. are -inf; row 1 (T=11): nothing masked.
  EXPECT_TRUE(at::isinf(merged.inputs.key_padding_mask[0].narrow(0, 3, 8)).all().item<bool>());
  EXPECT_EQ(merged.inputs.key_padding_mask[0].narrow(0, 0, 3).abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(merged.inputs.key_padding_mask[1].abs().sum().item<float>(), 0.0f);
  ExpectBatchedEqualsAlone(*model, requests);
}

TEST(BatchAssemblyTest, FullyMaskedRowStaysInItsRequest) {
  // PyTorch gives NaN for a query row whose keys are all masked; that NaN must not leak.
  auto model = testing::LoadFixtureModel("self_basic");
  ASSERT_NE(model, nullptr);
  auto gen = MakeGenerator(5);
  std::vector<ForwardInputs> requests = {MakeRequest(model->options(), {2, 5}, gen),
                                         MakeRequest(model->options(), {1, 7}, gen)};
  requests[0].key_padding_mask = at::zeros({2, 5}, at::kBool);
  requests[0].key_padding_mask[1].fill_(true);  // batch row 1: every key masked
  requests[0].need_weights = requests[1].need_weights = true;
  ExpectBatchedEqualsAlone(*model, requests);
  ForwardOutputs alone;
  ASSERT_TRUE(model->Forward(requests[0], &alone).ok());
  EXPECT_TRUE(at::isnan(alone.output[1]).all().item<bool>());
  EXPECT_FALSE(at::isnan(alone.output[0]).any().item<bool>());
}

TEST(BatchAssemblyTest, SplitOutputsOwnTheirMemory) {
  auto model = testing::LoadFixtureModel("add_zero_attn");
  ASSERT_NE(model, nullptr);
  auto gen = MakeGenerator(6);
  std::vector<ForwardInputs> requests = {MakeRequest(model->options(), {1, 2, 0}, gen),
                                         MakeRequest(model->options(), {1, 6, 0}, gen)};
  requests[0].need_weights = requests[1].need_weights = true;
  std::vector<const ForwardInputs*> pointers = {&requests[0], &requests[1]};
  const BatchModelInfo info = MakeBatchModelInfo(DescribeModel(*model));
  MergedBatch merged = MergeInputs(pointers, info);
  ForwardOutputs out;
  ASSERT_TRUE(model->Forward(merged.inputs, &out).ok());
  auto split = SplitOutputs(merged, out, info);
  EXPECT_EQ(split[0].attn_weights.sizes(), (std::vector<int64_t>{1, 2, 3}));  // S + zero key
  EXPECT_EQ(split[1].attn_weights.sizes(), (std::vector<int64_t>{1, 6, 7}));
  EXPECT_TRUE(split[0].output.is_contiguous());
  EXPECT_NE(split[0].output.data_ptr(), out.output.data_ptr());
}

// The whole path: a fixture model behind a DynamicBatcher, requests of mixed shapes and flags
// submitted together (so that several share passes); each answer equals the request run alone.
TEST(BatchAssemblyTest, ThroughTheBatcherAnswersEqualUnbatched) {
  auto model = testing::LoadFixtureModel("bias_kv_zero_attn_kpm");
  ASSERT_NE(model, nullptr);
  std::atomic<int> merged_passes{0};
  auto forward = [&](const ForwardInputs& in, ForwardOutputs* out) {
    if (in.query.size(0) > 1) ++merged_passes;
    return model->Forward(in, out);
  };
  BatcherOptions o;
  o.max_queue_delay_us = 100000;
  o.instances = 1;
  const BatchModelInfo info = MakeBatchModelInfo(DescribeModel(*model));
  DynamicBatcher batcher("m", info, MakePassRunner(info, forward), o, nullptr);
  auto gen = MakeGenerator(11);
  std::mt19937 rng(5);
  std::vector<ForwardInputs> requests;
  std::vector<std::promise<InferenceResult>> promises(24);
  for (int i = 0; i < 24; ++i) {
    RequestSpec spec;
    spec.t = 1 + rng() % 14;
    spec.s = (i % 3 == 0) ? 1 + rng() % 14 : 0;
    spec.kpm = static_cast<MaskKind>(rng() % 3);
    spec.attn = static_cast<MaskKind>(rng() % 5);
    spec.causal = i % 4 == 1;
    spec.need_weights = i % 2 == 0;
    spec.average = i % 6 == 0;
    requests.push_back(MakeRequest(model->options(), spec, gen));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    InferenceTask task;
    task.inputs = testing::ToHostInputs(requests[i]);
    batcher.Submit(std::move(task),
                   [&promises, i](InferenceResult r) { promises[i].set_value(std::move(r)); });
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const InferenceResult r =
        testing::GetWithin(promises[i].get_future(), "answer " + std::to_string(i));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    const ForwardOutputs got = testing::ToForwardOutputs(r.outputs);
    ForwardOutputs alone;
    ASSERT_TRUE(model->Forward(requests[i], &alone).ok());
    EXPECT_TRUE(TensorsNear(got.output, alone.output, kTolerance)) << "request " << i;
    ASSERT_EQ(got.attn_weights.defined(), alone.attn_weights.defined());
    if (alone.attn_weights.defined()) {
      EXPECT_TRUE(TensorsNear(got.attn_weights, alone.attn_weights, kTolerance));
    }
  }
  EXPECT_GT(merged_passes.load(), 0);
}

}  // namespace batch_assembly_test
}  // namespace mha::serve
