// DecodeSteps' padded pass (StepAttention::kPadded; kPerSession's choice on a device pool,
// mha/decode.h): equal to PyTorch's full causal forward with sessions of different lengths over
// pages holding NaN, equal to the per-session gather with cross- and self-attention sessions
// mixed, refused where padding would more than double the keys, and a pass's ATen work does not
// grow with its sessions (on a GPU each op is a launch, each id copy a wait for the stream).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "decode_test_util.h"
#include "mha/decode.h"
#include "op_counter.h"
#include "test_util.h"

namespace mha {
namespace decode_padded_test {

using testing::FillNaN;
using testing::kFp32Tolerance;
using testing::TensorsNear;

StepInputs Tokens(const at::Tensor& query, int64_t p, int64_t n) {
  StepInputs step;
  step.query = query.narrow(1, p, n);
  return step;
}

// Session i is prefilled with 1 + 3 * i tokens, then every session takes a token a round in one
// padded pass until the longest has the fixture's whole sequence: every pass pads.
TEST(DecodePadded, SessionsOfDifferentLengthsEqualTorchOverStalePages) {
  auto c = testing::LoadFixtureCase("decode_causal");  // the bias_kv fixture has a mask: below
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  constexpr int kSessions = 4;
  for (const std::string& device : testing::TestDevices()) {
    SCOPED_TRACE(device);
    auto model = testing::LoadCaseModel(*c, device);
    ASSERT_NE(model, nullptr);
    auto pool = testing::MakeKvPool(*model);
    FillNaN(*pool);
    const at::Tensor query = c->inputs.query.to(device);
    const int64_t total = query.size(1);
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<int64_t> done;
    for (int i = 0; i < kSessions; ++i) {
      caches.push_back(std::make_unique<KvCache>(pool, 2));
      const int64_t n = 1 + 3 * i;
      ASSERT_TRUE(caches[i]->Reserve(n).ok());
      ForwardOutputs out;
      ASSERT_TRUE(DecodeStep(*model, caches[i].get(), false, Tokens(query, 0, n), &out).ok());
      done.push_back(n);
    }
    for (int round = 0; done.back() < total; ++round) {
      std::vector<StepInputs> steps;
      std::vector<ForwardOutputs> outs(kSessions);
      for (int i = 0; i < kSessions; ++i) steps.push_back(Tokens(query, done[i], 1));
      std::vector<StepItem> items;
      for (int i = 0; i < kSessions; ++i) {
        ASSERT_TRUE(caches[i]->Reserve(1).ok());
        items.push_back(StepItem{caches[i].get(), false, &steps[i], &outs[i]});
      }
      ASSERT_TRUE(PaddedAttentionApplies(items)) << "round " << round;
      ASSERT_TRUE(DecodeSteps(*model, items, StepAttention::kPadded).ok());
      for (int i = 0; i < kSessions; ++i) {
        EXPECT_TRUE(TensorsNear(outs[i].output.cpu(), c->expected_output.narrow(1, done[i], 1),
                                kFp32Tolerance))
            << "session " << i << " round " << round;
        ++done[i];
      }
    }
  }
}

// Two self-attention sessions and two over an encoder's keys, in pools of the same contents.
struct Mixed {
  std::shared_ptr<KvBlockPool> pool;
  std::vector<std::unique_ptr<KvCache>> caches;
};

Mixed MakeMixed(const MhaModel& model, const std::vector<at::Tensor>& prefix) {
  Mixed m{testing::MakeKvPool(model), {}};
  for (size_t i = 0; i < prefix.size(); ++i) {
    m.caches.push_back(std::make_unique<KvCache>(m.pool, 2));
    KvCache& cache = *m.caches.back();
    if (i % 2 == 1) {  // cross: the encoder's keys and values
      EXPECT_TRUE(PrefillCross(model, &cache, prefix[i], prefix[i] * 0.5).ok());
    } else {
      EXPECT_TRUE(cache.Reserve(prefix[i].size(1) + 1).ok());
      ForwardOutputs out;
      EXPECT_TRUE(
          DecodeStep(model, &cache, false, Tokens(prefix[i], 0, prefix[i].size(1)), &out).ok());
    }
  }
  return m;
}

// The per-session gather equals PyTorch on every decode fixture (decode_test.cc).
TEST(DecodePadded, MixedCrossAndSelfSessionsEqualThePerSessionGather) {
  for (const char* name : {"decode_causal", "decode_causal_bias_kv_zero_attn"}) {
    SCOPED_TRACE(name);
    auto c = testing::LoadFixtureCase(name);  // E = kdim = vdim
    ASSERT_TRUE(c.ok());
    auto model = testing::LoadCaseModel(*c, "cpu");
    ASSERT_NE(model, nullptr);
    const int64_t e = model->options().embed_dim;
    std::vector<at::Tensor> prefix;
    for (int64_t n : {3, 7, 6, 2}) prefix.push_back(at::randn({2, n, e}));
    Mixed padded = MakeMixed(*model, prefix), each = MakeMixed(*model, prefix);
    std::vector<StepInputs> steps(4);
    std::vector<ForwardOutputs> a(4), b(4);
    std::vector<StepItem> pa, pb;
    for (size_t i = 0; i < 4; ++i) {
      steps[i].query = at::randn({2, 1, e});
      const bool cross = i % 2 == 1;
      pa.push_back(StepItem{padded.caches[i].get(), cross, &steps[i], &a[i]});
      pb.push_back(StepItem{each.caches[i].get(), cross, &steps[i], &b[i]});
    }
    ASSERT_TRUE(PaddedAttentionApplies(pa));
    ASSERT_TRUE(DecodeSteps(*model, pa, StepAttention::kPadded).ok());
    ASSERT_TRUE(DecodeSteps(*model, pb, StepAttention::kGather).ok());
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(TensorsNear(a[i].output, b[i].output, kFp32Tolerance)) << "session " << i;
      EXPECT_EQ(padded.caches[i]->length(), each.caches[i]->length()) << "session " << i;
    }
  }
}

TEST(DecodePadded, PaddingThatWouldMoreThanDoubleLargeKeysIsRefused) {
  auto c = testing::LoadFixtureCase("decode_causal");  // 256 bytes of keys + values a token
  ASSERT_TRUE(c.ok());
  auto model = testing::LoadCaseModel(*c, "cpu");
  ASSERT_NE(model, nullptr);
  constexpr int64_t kLong = 90000;  // 3 rows padded to it: 69 MB, over the 64 MiB of the rule
  auto pool = testing::MakeKvPool(*model, 16, int64_t{24} << 20);
  ASSERT_NE(pool, nullptr);
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int64_t n : {kLong, int64_t{1}, int64_t{1}}) {
    caches.push_back(std::make_unique<KvCache>(pool, 1));
    ASSERT_TRUE(caches.back()->Reserve(n + 1).ok());
    caches.back()->Append(at::zeros({1, n, 32}), at::zeros({1, n, 32}));
  }
  const StepInputs step = Tokens(at::zeros({1, 1, 32}), 0, 1);
  std::vector<ForwardOutputs> outs(3);
  auto items = [&](std::vector<size_t> which) {
    std::vector<StepItem> v;
    for (size_t i : which) v.push_back(StepItem{caches[i].get(), false, &step, &outs[i]});
    return v;
  };
  EXPECT_FALSE(PaddedAttentionApplies(items({0, 1, 2})));  // 3 × 90001 padded for 90005 real
  EXPECT_TRUE(PaddedAttentionApplies(items({1, 2})));      // small: padded or not
  EXPECT_TRUE(PaddedAttentionApplies(items({0, 1})));      // 2 × 90001 for 90003: under double
}

int WorkOpsOfOnePass(const MhaModel& model, int sessions, StepAttention attention) {
  auto pool = testing::MakeKvPool(model);
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<StepInputs> steps(static_cast<size_t>(sessions));
  std::vector<ForwardOutputs> outs(steps.size());
  std::vector<StepItem> items;
  const c10::Device device = model.weights().out_weight.device();
  for (int i = 0; i < sessions; ++i) {
    caches.push_back(std::make_unique<KvCache>(pool, 2));
    EXPECT_TRUE(caches.back()->Reserve(2 + i % 3 + 1).ok());
    caches.back()->Append(at::randn({2, 2 + i % 3, 32}).to(device),
                          at::randn({2, 2 + i % 3, 32}).to(device));
    steps[static_cast<size_t>(i)].query = at::randn({2, 1, 32});  // from the host, as served
    items.push_back(StepItem{caches.back().get(), false, &steps[static_cast<size_t>(i)],
                             &outs[static_cast<size_t>(i)]});
  }
  testing::OpCounter counter;
  const Status status = DecodeSteps(model, items, attention);
  counter.Stop();
  EXPECT_TRUE(status.ok()) << status.ToString();
  return counter.work();
}

TEST(DecodePadded, APassesWorkDoesNotGrowWithItsSessions) {
  auto c = testing::LoadFixtureCase("decode_causal");
  ASSERT_TRUE(c.ok());
  for (const std::string& device : testing::TestDevices()) {
    SCOPED_TRACE(device);
    auto model = testing::LoadCaseModel(*c, device);
    ASSERT_NE(model, nullptr);
    const int gather2 = WorkOpsOfOnePass(*model, 2, StepAttention::kGather);
    EXPECT_GT(WorkOpsOfOnePass(*model, 16, StepAttention::kGather), gather2 + 14)
        << "the per-session gather's ops grow with the sessions (the counter sees ops)";
    EXPECT_EQ(WorkOpsOfOnePass(*model, 16, StepAttention::kPadded),
              WorkOpsOfOnePass(*model, 2, StepAttention::kPadded));
    // What the server runs: on the CPU the pages read in place, on a GPU the padded pass.
    EXPECT_EQ(WorkOpsOfOnePass(*model, 16, StepAttention::kPerSession),
              WorkOpsOfOnePass(*model, 2, StepAttention::kPerSession));
  }
}

}  // namespace decode_padded_test
}  // namespace mha
