// LlamaLayerStep (mha/llama_step.h): the batch rows of every stateless fixture decoded as sessions,
// a prefill chunk then smaller steps, every layer through its own caches, in one pass per round;
// each step equals the rows of PyTorch's full causal forward (<= 1e-5), through the pages read in
// place and through the gather. Also the step's refusals and its rollback on failure.
#include "mha/llama_step.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "decode_test_util.h"
#include "llama_test_util.h"
#include "mha/paged_attention.h"
#include "op_counter.h"
#include "test_util.h"

namespace mha {
namespace llama_step_test {

using testing::Contains;
using testing::kFp32Tolerance;
using testing::LoadLlamaCase;
using testing::LoadLlamaStack;
using testing::TensorsNear;

struct StepParam {
  std::string fixture;
  int64_t first;  // prefill chunk
  int64_t step;   // tokens per later step
  bool gather;    // StepAttention::kGather instead of kPerSession
  std::string device;
};

void PrintTo(const StepParam& p, std::ostream* os) {
  *os << p.fixture << ": prefill " << p.first << ", then " << p.step << " per step"
      << (p.gather ? ", gathered" : "") << " on " << p.device;
}

std::string StepName(const ::testing::TestParamInfo<StepParam>& info) {
  const StepParam& p = info.param;
  return p.fixture + "_first" + std::to_string(p.first) + "_step" + std::to_string(p.step) +
         (p.gather ? "_gather" : "") + "_" + p.device;
}

class LlamaStepFixtureTest : public ::testing::TestWithParam<StepParam> {};

TEST_P(LlamaStepFixtureTest, StepwiseEqualsTorchCausalForward) {
  const StepParam& param = GetParam();
  const testing::LlamaCase c = LoadLlamaCase(param.fixture);
  auto stack = LoadLlamaStack(c, param.device);
  ASSERT_NE(stack, nullptr);
  auto pool = stack->CreateKvPool(KvPoolOptions{int64_t{1} << 20, /*block_tokens=*/3});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const at::Tensor& input = c.Io("input");  // [B, T, E]: B sessions of T tokens
  const int64_t b = input.size(0), total = input.size(1);
  for (int64_t layer = 0; layer < stack->num_layers(); ++layer) {
    const at::Tensor expected = c.Io("output." + std::to_string(layer));
    std::vector<std::unique_ptr<KvCache>> caches;
    for (int64_t i = 0; i < b; ++i) caches.push_back(std::make_unique<KvCache>(*pool, 1));
    for (int64_t p = 0, n = param.first; p < total; p += n, n = param.step) {
      n = std::min(n, total - p);
      std::vector<at::Tensor> outs(static_cast<size_t>(b));
      std::vector<LlamaStepItem> items;
      for (int64_t i = 0; i < b; ++i) {
        ASSERT_TRUE(caches[i]->Reserve(n).ok());
        items.push_back(LlamaStepItem{caches[i].get(), input[i].narrow(0, p, n), &outs[i]});
      }
      ASSERT_TRUE(CheckLlamaStep(*stack, layer, items).ok());
      EXPECT_EQ(LlamaPagedApplies(stack->config(), items),
                param.device == "cpu" && n <= kMaxPagedTokens);
      Status s = LlamaLayerStep(*stack, layer, items,
                                param.gather ? StepAttention::kGather : StepAttention::kPerSession);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (int64_t i = 0; i < b; ++i) {
        EXPECT_EQ(caches[i]->length(), p + n);
        EXPECT_TRUE(TensorsNear(outs[i], expected[i].narrow(0, p, n), kFp32Tolerance))
            << "layer " << layer << " session " << i << " tokens " << p << ".." << p + n - 1;
      }
    }
  }
}

std::vector<StepParam> StepParams() {
  std::vector<StepParam> params;
  for (const std::string& device : testing::TestDevices()) {
    for (const std::string& name : testing::LlamaCaseNames("stateless")) {
      for (bool gather : {false, true}) {
        params.push_back({name, 1, 1, gather, device});  // one token a step
        params.push_back({name, 5, 1, gather, device});  // a gathered prefill, then tokens
        params.push_back({name, 3, 2, gather, device});  // chunks throughout
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaStepFixtureTest, ::testing::ValuesIn(StepParams()),
                         StepName);

// Session i joins at round i and then takes a token a round, every pass padded (kPadded) over
// pages holding NaN: the sessions' lengths differ in every pass.
TEST(LlamaStepPadded, StaggeredSessionsEqualTorchOverStalePages) {
  for (const std::string& device : testing::TestDevices()) {
    for (const std::string& name : testing::LlamaCaseNames("stateless")) {
      SCOPED_TRACE(name + " on " + device);
      const testing::LlamaCase c = LoadLlamaCase(name);
      auto stack = LoadLlamaStack(c, device);
      ASSERT_NE(stack, nullptr);
      auto pool = stack->CreateKvPool(KvPoolOptions{int64_t{1} << 20, /*block_tokens=*/3});
      ASSERT_TRUE(pool.ok()) << pool.status().ToString();
      testing::FillNaN(**pool);
      const at::Tensor& input = c.Io("input");
      const int64_t b = input.size(0), total = input.size(1);
      ASSERT_GE(b, 2) << "sessions to pad";
      const at::Tensor expected = c.Io("output.0");
      std::vector<std::unique_ptr<KvCache>> caches;
      for (int64_t i = 0; i < b; ++i) caches.push_back(std::make_unique<KvCache>(*pool, 1));
      int padded = 0;
      for (int64_t round = 0; round < total + b - 1; ++round) {
        std::vector<at::Tensor> outs(static_cast<size_t>(b));
        std::vector<LlamaStepItem> items;
        std::vector<int64_t> who;
        for (int64_t i = 0; i < b; ++i) {
          const int64_t p = round - i;
          if (p < 0 || p >= total) continue;
          ASSERT_TRUE(caches[i]->Reserve(1).ok());
          items.push_back(
              LlamaStepItem{caches[i].get(), input[i].narrow(0, p, 1).to(device), &outs[i]});
          who.push_back(i);
        }
        padded += LlamaPaddedApplies(items) ? 1 : 0;
        Status s = LlamaLayerStep(*stack, 0, items, StepAttention::kPadded);
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (int64_t i : who) {
          EXPECT_TRUE(
              TensorsNear(outs[i].cpu(), expected[i].narrow(0, round - i, 1), kFp32Tolerance))
              << "session " << i << " token " << round - i;
        }
      }
      EXPECT_GE(padded, total - b + 1) << "the padded pass must have run";
    }
  }
}

// One pass of `sessions` one-token steps at different cache lengths: its work ops (op_counter.h).
int LlamaWorkOps(const LlamaAttentionStack& stack, int sessions, StepAttention attention) {
  auto pool = stack.CreateKvPool(KvPoolOptions{int64_t{1} << 20, 4});
  EXPECT_TRUE(pool.ok());
  const int64_t e = stack.config().hidden_size;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<at::Tensor> outs(static_cast<size_t>(sessions));
  std::vector<LlamaStepItem> items;
  for (int i = 0; i < sessions; ++i) {
    caches.push_back(std::make_unique<KvCache>(*pool, 1));
    at::Tensor prefill_out;
    EXPECT_TRUE(caches.back()->Reserve(2 + i % 3 + 1).ok());
    LlamaStepItem prefill{caches.back().get(), at::randn({2 + i % 3, e}), &prefill_out};
    EXPECT_TRUE(LlamaLayerStep(stack, 0, {prefill}).ok());
    items.push_back(LlamaStepItem{caches.back().get(), at::randn({1, e}), &outs[i]});
  }
  testing::OpCounter counter;
  const Status status = LlamaLayerStep(stack, 0, items, attention);
  counter.Stop();
  EXPECT_TRUE(status.ok()) << status.ToString();
  return counter.work();
}

TEST(LlamaStepPadded, APassesWorkDoesNotGrowWithItsSessions) {
  for (const std::string& device : testing::TestDevices()) {
    SCOPED_TRACE(device);
    auto stack = LoadLlamaStack(LoadLlamaCase("gqa_ratio4"), device);
    ASSERT_NE(stack, nullptr);
    // From 4 rows on, Q, K and V are one GEMM (llama_ops.h): compare 4 and 16 sessions.
    EXPECT_GT(LlamaWorkOps(*stack, 16, StepAttention::kGather),
              LlamaWorkOps(*stack, 4, StepAttention::kGather) + 12)
        << "the per-session gather's ops grow with the sessions (the counter sees ops)";
    EXPECT_EQ(LlamaWorkOps(*stack, 16, StepAttention::kPadded),
              LlamaWorkOps(*stack, 4, StepAttention::kPadded));
    if (device != "cpu") {  // what the server runs there
      EXPECT_EQ(LlamaWorkOps(*stack, 16, StepAttention::kPerSession),
                LlamaWorkOps(*stack, 4, StepAttention::kPerSession));
    }
  }
}

class LlamaStepCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stack_ = LoadLlamaStack(LoadLlamaCase("gqa_ratio4"));  // E=64, KV=2, D=8
    ASSERT_NE(stack_, nullptr);
    auto pool = stack_->CreateKvPool(KvPoolOptions{int64_t{1} << 20, 4});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = *pool;
  }
  Status Check(const std::vector<LlamaStepItem>& items, int64_t layer = 0) const {
    return CheckLlamaStep(*stack_, layer, items);
  }

  std::shared_ptr<LlamaAttentionStack> stack_;
  std::shared_ptr<KvBlockPool> pool_;
  at::Tensor out_;
};

TEST_F(LlamaStepCheckTest, RefusalsNameTheEntryAndTheNumbers) {
  KvCache a(pool_, 1), b(pool_, 1), two_rows(pool_, 2);
  const at::Tensor x = at::zeros({2, 64});
  EXPECT_TRUE(Check({{&a, x, &out_}, {&b, x, &out_}}).ok());
  EXPECT_TRUE(Contains(Check({{&a, x, &out_}}, 2).message(),
                       "layer 2 out of range: the model has 2 layers (0 .. 1)"));
  const std::pair<std::vector<LlamaStepItem>, std::string> cases[] = {
      {{{&a, x, &out_}, {&a, x, &out_}},
       "entries 0 and 1 step the same cache: one entry per session and layer in a step"},
      {{{&a, x, &out_}, {&b, at::zeros({1, 1, 64}), &out_}},
       "entry 1: hidden: expected floating [t >= 1, 64] (new tokens, hidden_size), got [1, 1, 64] "
       "Float"},
      {{{&a, at::zeros({0, 64}), &out_}}, "entry 0: hidden: expected floating"},
      {{{&a, at::zeros({2, 64}, at::kInt), &out_}}, "got [2, 64] Int"},
      {{{&two_rows, x, &out_}}, "entry 0: a session's layer cache holds one sequence, this one 2"},
      {{{&a, x, nullptr}}, "entry 0: a cache and an output are required"},
      {{{nullptr, x, &out_}}, "entry 0: a cache and an output are required"},
  };
  for (const auto& [items, message] : cases) {
    const Status s = Check(items);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << message;
    EXPECT_TRUE(Contains(s.message(), message));
  }
}

TEST_F(LlamaStepCheckTest, CachesFromAnotherLayoutAreRefused) {
  auto mha_stack = LoadLlamaStack(LoadLlamaCase("mha_ratio1"));  // KV=4, D=8
  ASSERT_NE(mha_stack, nullptr);
  auto other = mha_stack->CreateKvPool(KvPoolOptions{int64_t{1} << 20, 4});
  ASSERT_TRUE(other.ok());
  KvCache cache(*other, 1);
  const Status s = Check({{&cache, at::zeros({1, 64}), &out_}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(),
                       "entry 0: the cache's pool stores 4 heads of 8 Float on cpu "
                       "per token, the model's layers need 2 heads of 8 Float on cpu"));
}

TEST_F(LlamaStepCheckTest, AFailedStepLeavesEveryCacheAtItsLength) {
  KvCache ready(pool_, 1), unreserved(pool_, 1);
  ASSERT_TRUE(ready.Reserve(3).ok());
  at::Tensor out0, out1;
  const std::vector<LlamaStepItem> items = {{&ready, at::randn({3, 64}), &out0},
                                            {&unreserved, at::randn({2, 64}), &out1}};
  ASSERT_TRUE(Check(items).ok());
  const Status s = LlamaLayerStep(*stack_, 0, items);  // the second cache has no room
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_TRUE(Contains(s.message(), "Llama layer step failed"));
  EXPECT_EQ(ready.length(), 0);
  EXPECT_EQ(unreserved.length(), 0);
  ASSERT_TRUE(unreserved.Reserve(2).ok());
  EXPECT_TRUE(LlamaLayerStep(*stack_, 0, items).ok());  // the same step, now with room
  EXPECT_EQ(ready.length(), 3);
  EXPECT_EQ(out1.sizes().vec(), (std::vector<int64_t>{2, 64}));
}

}  // namespace llama_step_test
}  // namespace mha
