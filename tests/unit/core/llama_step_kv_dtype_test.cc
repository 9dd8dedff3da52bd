// Llama layer steps (mha/llama_step.h, mha/llama_session.h) over caches in each dtype
// (mha/kv_cache_dtype.h): every stateless fixture's batch rows decoded as sessions (a prefill
// chunk, then a token a round) give, through the pages read in place, the padded pass and the
// gather, the same answers (within fp32 rounding) and answers within the dtype's bound of the fp32
// cache's (which equal PyTorch, llama_step_test.cc). A session of every layer spilled and restored
// mid-decode, and a fork, step on bit for bit as the session they copy.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "decode_test_util.h"
#include "kv_dtype_bounds.h"
#include "llama_test_util.h"
#include "mha/kv_spill.h"
#include "mha/llama_session.h"
#include "mha/llama_step.h"
#include "test_util.h"

namespace mha {
namespace llama_step_kv_dtype_test {

using testing::RelativeError;
using testing::TensorsNear;

double Bound(KvCacheDtype dtype) { return testing::KvDtypeStepBound(dtype); }

std::shared_ptr<KvBlockPool> Pool(const LlamaAttentionStack& stack, KvCacheDtype dtype) {
  auto pool = stack.CreateKvPool(KvPoolOptions{int64_t{4} << 20, /*block_tokens=*/3, dtype});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  if (!pool.ok()) return nullptr;
  testing::FillNaN(**pool);
  return *pool;
}

// Every step's outputs of every layer, in order: the fixture's B rows as B sessions, a prefill of
// 2 tokens, then a token a round, through `attention` over a cache in `dtype`.
std::vector<at::Tensor> Decode(const LlamaAttentionStack& stack, const at::Tensor& input,
                               KvCacheDtype dtype, StepAttention attention) {
  auto pool = Pool(stack, dtype);
  if (pool == nullptr) return {};
  const int64_t b = input.size(0), total = input.size(1);
  std::vector<at::Tensor> all;
  for (int64_t layer = 0; layer < stack.num_layers(); ++layer) {
    std::vector<std::unique_ptr<KvCache>> caches;
    for (int64_t i = 0; i < b; ++i) caches.push_back(std::make_unique<KvCache>(pool, 1));
    for (int64_t p = 0, n = 2; p < total; p += n, n = 1) {
      std::vector<at::Tensor> outs(static_cast<size_t>(b));
      std::vector<LlamaStepItem> items;
      for (int64_t i = 0; i < b; ++i) {
        EXPECT_TRUE(caches[i]->Reserve(n).ok());
        items.push_back(LlamaStepItem{caches[i].get(), input[i].narrow(0, p, n), &outs[i]});
      }
      const Status s = LlamaLayerStep(stack, layer, items, attention);
      EXPECT_TRUE(s.ok()) << s.ToString();
      all.insert(all.end(), outs.begin(), outs.end());
    }
  }
  return all;
}

class LlamaStepKvDtypeTest : public ::testing::TestWithParam<KvCacheDtype> {};

TEST_P(LlamaStepKvDtypeTest, EveryPathAgreesAndStaysWithinTheBoundOfTheFp32Cache) {
  for (const std::string& name : testing::LlamaCaseNames("stateless")) {
    SCOPED_TRACE(name);
    const testing::LlamaCase c = testing::LoadLlamaCase(name);
    auto stack = testing::LoadLlamaStack(c);
    ASSERT_NE(stack, nullptr);
    const at::Tensor& input = c.Io("input");
    const std::vector<at::Tensor> fp32 =
        Decode(*stack, input, KvCacheDtype::kFloat32, StepAttention::kGather);
    std::map<StepAttention, std::vector<at::Tensor>> paths;
    for (StepAttention a :
         {StepAttention::kPerSession, StepAttention::kPadded, StepAttention::kGather}) {
      paths[a] = Decode(*stack, input, GetParam(), a);
      ASSERT_EQ(paths[a].size(), fp32.size());
    }
    double worst = 0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      const at::Tensor& paged = paths[StepAttention::kPerSession][i];
      EXPECT_TRUE(TensorsNear(paths[StepAttention::kPadded][i], paged, 1e-5)) << "output " << i;
      EXPECT_TRUE(TensorsNear(paths[StepAttention::kGather][i], paged, 1e-5)) << "output " << i;
      const double err = RelativeError(paged, fp32[i]);
      worst = std::max(worst, err);
      EXPECT_LE(err, Bound(GetParam())) << "output " << i;
    }
    RecordProperty(name + "_worst_rel_err", std::to_string(worst));
  }
}

// One token of every layer for `session` ([1, E] rows of `tokens` at position p).
std::vector<at::Tensor> StepAllLayers(const LlamaAttentionStack& stack, LlamaSessionCache* session,
                                      const at::Tensor& tokens, int64_t p) {
  std::vector<at::Tensor> outs;
  for (int64_t layer = 0; layer < stack.num_layers(); ++layer) {
    at::Tensor out;
    const Status s =
        StepSessions(stack, layer, {LlamaSessionStep{session, tokens[p].view({1, -1}), &out}});
    EXPECT_TRUE(s.ok()) << s.ToString();
    outs.push_back(out);
  }
  return outs;
}

TEST_P(LlamaStepKvDtypeTest, ASpilledAndRestoredSessionAndAForkStepOnBitForBit) {
  const testing::LlamaCase c = testing::LoadLlamaCase("stack4_sessions");
  auto stack = testing::LoadLlamaStack(c);
  ASSERT_NE(stack, nullptr);
  auto pool = Pool(*stack, GetParam());
  ASSERT_NE(pool, nullptr);
  at::manual_seed(57);
  const at::Tensor tokens = at::randn({9, stack->config().hidden_size});
  auto make = [&] { return LlamaSessionCache::Create({pool, stack->num_layers(), 0}).value(); };
  auto kept = make(), spilled = make();
  for (int64_t p = 0; p < 7; ++p) {
    StepAllLayers(*stack, kept.get(), tokens, p);
    StepAllLayers(*stack, spilled.get(), tokens, p);
  }
  auto store = std::make_shared<HostSpillStore>();
  ASSERT_TRUE(spilled->Spill(store, "s").ok());
  EXPECT_EQ(spilled->spilled_bytes(), stack->num_layers() * 7 * pool->bytes_per_token());
  auto fork = kept->Fork(7);
  ASSERT_TRUE(fork.ok());
  ASSERT_TRUE(spilled->Restore().ok());
  for (int64_t p = 7; p < 9; ++p) {
    const std::vector<at::Tensor> want = StepAllLayers(*stack, kept.get(), tokens, p);
    const std::vector<at::Tensor> restored = StepAllLayers(*stack, spilled.get(), tokens, p);
    const std::vector<at::Tensor> forked = StepAllLayers(*stack, fork->get(), tokens, p);
    for (size_t l = 0; l < want.size(); ++l) {
      EXPECT_TRUE(at::equal(restored[l], want[l])) << "layer " << l << " token " << p;
      EXPECT_TRUE(at::equal(forked[l], want[l])) << "layer " << l << " token " << p;
    }
  }
}

std::string DtypeName(const ::testing::TestParamInfo<KvCacheDtype>& info) {
  return KvCacheDtypeName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlamaStepKvDtypeTest,
                         ::testing::Values(KvCacheDtype::kFloat32, KvCacheDtype::kBFloat16,
                                           KvCacheDtype::kFloat16, KvCacheDtype::kInt8),
                         DtypeName);

}  // namespace llama_step_kv_dtype_test
}  // namespace mha
