// One-layer decode steps (mha/decode.h) over caches in each dtype (mha/kv_cache_dtype.h): sessions
// of different lengths decoded in merged passes through every path (pages read in place, the
// padded pass, the per-session gather) give, in every dtype, the same answers on every path
// (within fp32 rounding: each is the attention over the same decoded cache), and answers within
// the dtype's bound of the fp32 cache's (which equal PyTorch, decode_test.cc). Cross-attention
// sessions too.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "decode_test_util.h"
#include "kv_dtype_bounds.h"
#include "mha/decode.h"
#include "mha/paged_attention.h"
#include "test_util.h"

namespace mha {
namespace decode_kv_dtype_test {

using testing::RelativeError;
using testing::TensorsNear;

double Bound(KvCacheDtype dtype) { return testing::KvDtypeStepBound(dtype); }

// Every step's output, session by session in round order, of a staggered decode
// (decode_test_util.h) of the fixture's query through `attention` over a cache in `dtype`.
std::vector<at::Tensor> Decode(const MhaModel& model, const ForwardInputs& full, KvCacheDtype dtype,
                               StepAttention attention) {
  auto pool = testing::MakeKvPool(model, 4, int64_t{4} << 20, dtype);
  EXPECT_NE(pool, nullptr);
  if (pool == nullptr) return {};
  testing::FillNaN(*pool);
  std::vector<at::Tensor> outs;
  testing::DecodeStaggered(
      pool, full.query.size(1), 3,
      [&](int64_t p, int64_t n) {
        StepInputs step;
        step.query = full.query.narrow(1, p, n);
        return step;
      },
      [&](const std::vector<StepItem>& items) {
        const Status s = DecodeSteps(model, items, attention);
        ASSERT_TRUE(s.ok()) << s.ToString();
      },
      [&](int, int64_t, int64_t, const ForwardOutputs& out) { outs.push_back(out.output); });
  return outs;
}

class DecodeKvDtypeTest : public ::testing::TestWithParam<KvCacheDtype> {};

TEST_P(DecodeKvDtypeTest, EveryPathAgreesAndStaysWithinTheBoundOfTheFp32Cache) {
  const KvCacheDtype dtype = GetParam();
  for (const char* name : {"decode_causal", "decode_causal_long"}) {
    SCOPED_TRACE(name);
    auto c = testing::LoadFixtureCase(name);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto model = testing::LoadCaseModel(*c, "cpu");
    ASSERT_NE(model, nullptr);
    const std::vector<at::Tensor> fp32 =
        Decode(*model, c->inputs, KvCacheDtype::kFloat32, StepAttention::kGather);
    std::map<StepAttention, std::vector<at::Tensor>> paths;
    for (StepAttention a :
         {StepAttention::kPerSession, StepAttention::kPadded, StepAttention::kGather}) {
      paths[a] = Decode(*model, c->inputs, dtype, a);
      ASSERT_EQ(paths[a].size(), fp32.size());
    }
    double worst = 0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      const at::Tensor& paged = paths[StepAttention::kPerSession][i];
      EXPECT_TRUE(TensorsNear(paths[StepAttention::kPadded][i], paged, 1e-5)) << "step " << i;
      EXPECT_TRUE(TensorsNear(paths[StepAttention::kGather][i], paged, 1e-5)) << "step " << i;
      const double err = RelativeError(paged, fp32[i]);
      worst = std::max(worst, err);
      EXPECT_LE(err, Bound(dtype)) << "step " << i;
    }
    RecordProperty(std::string(name) + "_worst_rel_err", std::to_string(worst));
  }
}

TEST_P(DecodeKvDtypeTest, CrossAttentionOverAQuantizedEncoderCacheStaysWithinTheBound) {
  auto c = testing::LoadFixtureCase("decode_causal");
  ASSERT_TRUE(c.ok());
  auto model = testing::LoadCaseModel(*c, "cpu");
  ASSERT_NE(model, nullptr);
  at::manual_seed(11);
  const at::Tensor encoder = at::randn({2, 9, model->options().embed_dim});
  std::vector<at::Tensor> outs;
  for (KvCacheDtype d : {KvCacheDtype::kFloat32, GetParam()}) {
    for (StepAttention a : {StepAttention::kPerSession, StepAttention::kGather}) {
      KvCache cache(testing::MakeKvPool(*model, 4, int64_t{1} << 20, d), 2);
      ASSERT_TRUE(PrefillCross(*model, &cache, encoder, encoder * 0.5).ok());
      StepInputs step;
      step.query = c->inputs.query.narrow(1, 0, 2);
      ForwardOutputs out;
      ASSERT_TRUE(DecodeSteps(*model, {StepItem{&cache, true, &step, &out}}, a).ok());
      outs.push_back(out.output);
    }
  }
  EXPECT_TRUE(TensorsNear(outs[3], outs[2], 1e-5)) << "paged and gathered agree";
  EXPECT_LE(RelativeError(outs[2], outs[0]), Bound(GetParam()));
}

std::string DtypeName(const ::testing::TestParamInfo<KvCacheDtype>& info) {
  return KvCacheDtypeName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeKvDtypeTest,
                         ::testing::Values(KvCacheDtype::kFloat32, KvCacheDtype::kBFloat16,
                                           KvCacheDtype::kFloat16, KvCacheDtype::kInt8),
                         DtypeName);

}  // namespace decode_kv_dtype_test
}  // namespace mha
