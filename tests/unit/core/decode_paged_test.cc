// Decode steps whose attention reads the KV pages in place (mha/paged_attention.h: float32 on the
// CPU, no masks, no weights) against PyTorch: a session decoded step by step equals the fixture's
// one torch.nn.MultiheadAttention forward (causal over the whole prefix for self-attention, over
// the encoder's keys for cross-attention) within 1e-5, for page sizes that do and do not divide
// the length, sequences crossing page boundaries, and sessions of different lengths in one pass.
// Also the pages themselves: appends written through views of the pages, gathers by block.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "decode_test_util.h"
#include "mha/attention_ops.h"
#include "mha/decode.h"
#include "mha/loader.h"
#include "mha/paged_attention.h"
#include "test_util.h"

namespace mha {
namespace decode_paged_test {

using testing::FixtureCase;
using testing::TensorsNear;

using testing::kFp32Tolerance;

using testing::LoadCaseModel;

std::shared_ptr<KvBlockPool> MakePool(const MhaModel& model, int64_t block_tokens) {
  return testing::MakeKvPool(model, block_tokens, int64_t{4} << 20);
}

// The step of query rows [p, p + n), without weights (the paged path's condition).
StepInputs StepOf(const ForwardInputs& full, int64_t p, int64_t n) {
  StepInputs step;
  step.query = full.query.narrow(1, p, n);
  return step;
}

// Runs `items` as one pass, checking that the paged path serves it when every item has at most
// kMaxPagedTokens new tokens (longer prefill chunks take the gather path) and the pages are on the
// CPU (a CUDA session always takes the gather path: docs/sessions.md).
void Decode(const MhaModel& model, const std::vector<StepItem>& items) {
  int64_t longest = 0;
  for (const StepItem& item : items) longest = std::max(longest, item.inputs->query.size(1));
  const bool on_cpu = model.device() == "cpu";
  EXPECT_EQ(PagedAttentionApplies(model, items), on_cpu && longest <= kMaxPagedTokens);
  Status status = DecodeSteps(model, items);
  ASSERT_TRUE(status.ok()) << status.ToString();
}

struct PagedParam {
  std::string fixture;
  int64_t block_tokens;
  int64_t first;       // prefill size
  int64_t step;        // tokens per later step
  std::string device;  // "cpu", or "cuda" when this build sees a GPU (testing::TestDevices)
};
void PrintTo(const PagedParam& p, std::ostream* os) {
  *os << p.fixture << ": pages of " << p.block_tokens << ", prefill " << p.first << ", then "
      << p.step << " per step on " << p.device;
}
std::string ParamName(const ::testing::TestParamInfo<PagedParam>& info) {
  const PagedParam& p = info.param;
  return p.fixture + "_page" + std::to_string(p.block_tokens) + "_first" + std::to_string(p.first) +
         "_step" + std::to_string(p.step) + (p.device == "cpu" ? "" : "_" + p.device);
}

class PagedSelfDecodeTest : public ::testing::TestWithParam<PagedParam> {};

TEST_P(PagedSelfDecodeTest, StepwiseEqualsTorchCausalForward) {
  const PagedParam& param = GetParam();
  auto c = testing::LoadFixtureCase(param.fixture);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->inputs.is_causal && !c->inputs.key.defined()) << "a causal self-attention case";
  auto model = LoadCaseModel(*c, param.device);
  ASSERT_NE(model, nullptr);
  const int64_t b = c->inputs.query.size(0), total = c->inputs.query.size(1);
  const int64_t bt = param.block_tokens;
  KvCache cache(MakePool(*model, bt), b);
  for (int64_t p = 0, n = param.first; p < total; p += n, n = param.step) {
    n = std::min(n, total - p);
    SCOPED_TRACE("tokens " + std::to_string(p) + ".." + std::to_string(p + n - 1));
    StepInputs step = StepOf(c->inputs, p, n);
    ASSERT_TRUE(CheckStepInputs(model->options(), cache, false, step).ok());
    ASSERT_TRUE(cache.Reserve(n).ok());
    ForwardOutputs out;
    Decode(*model, {StepItem{&cache, false, &step, &out}});
    EXPECT_EQ(cache.length(), p + n);
    EXPECT_TRUE(TensorsNear(out.output, c->expected_output.narrow(1, p, n), kFp32Tolerance));
    EXPECT_FALSE(out.attn_weights.defined());
  }
  EXPECT_EQ(cache.blocks_held(), b * ((total + bt - 1) / bt));
}

std::vector<PagedParam> SelfParams() {
  std::vector<PagedParam> params;
  // decode_causal: E=32 H=4 B=2 T=12; decode_causal_long: E=64 H=8 B=2 T=40; causal: T=5.
  for (const std::string& d : testing::TestDevices()) {
    for (const char* name : {"decode_causal", "decode_causal_long", "causal"}) {
      for (int64_t bt : {1, 4, 7, 16}) {        // 7 and 16 divide none of 12, 40, 5
        params.push_back({name, bt, 1, 1, d});  // one token per step
        params.push_back({name, bt, 7, 1, d});  // a (gathered) prefill crossing a page, then tokens
        params.push_back({name, bt, 3, 4, d});  // chunks throughout, all read in place
        params.push_back({name, bt, 2, 3, d});
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PagedSelfDecodeTest, ::testing::ValuesIn(SelfParams()),
                         ParamName);

class PagedCrossDecodeTest : public ::testing::TestWithParam<PagedParam> {};

TEST_P(PagedCrossDecodeTest, StepwiseOverEncoderPagesEqualsTorchForward) {
  const PagedParam& param = GetParam();
  auto c = testing::LoadFixtureCase(param.fixture);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->inputs.key.defined() && !c->inputs.is_causal) << "a cross-attention case";
  auto model = LoadCaseModel(*c, param.device);
  ASSERT_NE(model, nullptr);
  const int64_t total = c->inputs.query.size(1);
  KvCache cache(MakePool(*model, param.block_tokens), c->inputs.query.size(0));
  Status prefill = PrefillCross(*model, &cache, c->inputs.key, c->inputs.value);
  ASSERT_TRUE(prefill.ok()) << prefill.ToString();
  for (int64_t p = 0, n = param.first; p < total; p += n, n = param.step) {
    n = std::min(n, total - p);
    StepInputs step = StepOf(c->inputs, p, n);
    ASSERT_TRUE(CheckStepInputs(model->options(), cache, true, step).ok());
    ForwardOutputs out;
    Decode(*model, {StepItem{&cache, true, &step, &out}});
    EXPECT_TRUE(TensorsNear(out.output, c->expected_output.narrow(1, p, n), kFp32Tolerance))
        << "tokens " << p << ".." << p + n - 1;
  }
  EXPECT_EQ(cache.length(), c->inputs.key.size(1));
}

std::vector<PagedParam> CrossParams() {
  std::vector<PagedParam> params;
  // cross_attention: T=4 over S=6 encoder tokens; kdim_vdim: separate q/k/v weights (no fused
  // in-projection); query_len1: T=1 over S=5.
  for (const std::string& d : testing::TestDevices()) {
    for (const char* name : {"cross_attention", "kdim_vdim", "query_len1"}) {
      for (int64_t bt : {1, 4, 7}) {  // 4 does not divide 6 or 5: the encoder keys cross a page
        params.push_back({name, bt, 1, 1, d});
        params.push_back({name, bt, 2, 3, d});
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PagedCrossDecodeTest, ::testing::ValuesIn(CrossParams()),
                         ParamName);

// Sessions of different lengths in every pass: session i joins i rounds late with a prefill of
// 1 + i tokens, so passes mix short prefills and single tokens, caches of different lengths and
// page boundaries crossed at different steps (pages of 7 tokens, T = 40), all read in place (on
// CUDA: the same passes through the block gather).
TEST(PagedDecodeBatch, SessionsOfDifferentLengthsInOnePassEqualTorch) {
  auto c = testing::LoadFixtureCase("decode_causal_long");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const std::string& device : testing::TestDevices()) {
    SCOPED_TRACE(device);
    auto model = LoadCaseModel(*c, device);
    ASSERT_NE(model, nullptr);
    testing::DecodeStaggered(
        MakePool(*model, 7), c->inputs.query.size(1), 4,
        [&](int64_t p, int64_t n) { return StepOf(c->inputs, p, n); },
        [&](const std::vector<StepItem>& items) { Decode(*model, items); },
        [&](int i, int64_t p, int64_t n, const ForwardOutputs& out) {
          EXPECT_TRUE(TensorsNear(out.output, c->expected_output.narrow(1, p, n), kFp32Tolerance))
              << "session " << i << " rows from " << p;
        });
  }
}

// Appends written through the pages and the block gather: Keys()/Values() give back exactly
// the appended rows, in split_heads layout, for a page size that does not divide the length and
// pages taken out of order from the pool.
TEST(KvCachePages, AppendsReadBackExactlyThroughTheBlockGather) {
  auto c = testing::LoadFixtureCase("decode_causal");  // E=32 H=4
  ASSERT_TRUE(c.ok());
  auto model = LoadCaseModel(*c);
  ASSERT_NE(model, nullptr);
  auto pool = MakePool(*model, 4);
  KvCache other(pool, 1), cache(pool, 2);
  const at::Tensor k = at::randn({2, 11, 32}), v = at::randn({2, 11, 32});
  int64_t p = 0;
  for (int64_t n : {3, 1, 7}) {
    ASSERT_TRUE(cache.Reserve(n).ok());
    ASSERT_TRUE(other.Reserve(n).ok());  // interleaves the two caches' pages in the pool
    // A strided view, as the fused projection's k/v columns are.
    const at::Tensor kv = at::cat({k.narrow(1, p, n), v.narrow(1, p, n)}, 2);
    cache.Append(kv.narrow(2, 0, 32), kv.narrow(2, 32, 32));
    other.Append(at::zeros({1, n, 32}), at::zeros({1, n, 32}));
    p += n;
  }
  EXPECT_EQ(cache.length(), 11);
  EXPECT_TRUE(at::equal(cache.Keys(), split_heads(k, 4)));
  EXPECT_TRUE(at::equal(cache.Values(), split_heads(v, 4)));
  cache.RollbackTo(6);
  EXPECT_TRUE(at::equal(cache.Keys(), split_heads(k.narrow(1, 0, 6), 4)));
}

}  // namespace decode_paged_test
}  // namespace mha
