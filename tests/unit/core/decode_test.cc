// Step-wise decoding over the paged KV cache (mha/decode.h, mha/kv_cache.h) against PyTorch: a
// sequence decoded one token or a chunk at a time equals the fixture's one full causal forward
// (self-attention), or the full forward over the encoder's keys (cross-attention).
#include "mha/decode.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ostream>
#include <tuple>
#include <vector>

#include "decode_test_util.h"
#include "mha/loader.h"
#include "test_util.h"

namespace mha {
namespace decode_test {

using testing::FixtureCase;
using testing::TensorsNear;

using testing::kFp32Tolerance;

using testing::LoadCaseModel;
using testing::MakeKvPool;

// Chunk sizes that cover `total` tokens: a first chunk, then `step` at a time.
std::vector<int64_t> Chunks(int64_t total, int64_t first, int64_t step) {
  std::vector<int64_t> chunks;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(total - done, done == 0 ? first : step);
    chunks.push_back(n);
    done += n;
  }
  return chunks;
}

// The reference weights of query rows [p, p + c) restricted to the first `keys` key columns plus
// the `extra` columns (bias_k, zero key) PyTorch appends after the S keys.
at::Tensor ExpectedWeights(const at::Tensor& full, int64_t p, int64_t c, int64_t keys,
                           int64_t extra) {
  const int64_t s_all = full.size(-1);
  at::Tensor rows = full.narrow(-2, p, c);
  at::Tensor cols = rows.narrow(-1, 0, keys);
  if (extra > 0) cols = at::cat({cols, rows.narrow(-1, s_all - extra, extra)}, -1);
  return cols;
}

// The step's slice of the full request's masks: query rows [p, p + c), key columns [0, keys).
StepInputs StepOf(const ForwardInputs& full, int64_t p, int64_t c, int64_t keys) {
  StepInputs step;
  step.query = full.query.narrow(1, p, c);
  if (full.key_padding_mask.defined())
    step.key_padding_mask = full.key_padding_mask.narrow(1, 0, keys);
  if (full.attn_mask.defined()) {
    const int64_t d = full.attn_mask.dim();
    step.attn_mask = full.attn_mask.narrow(d - 2, p, c).narrow(d - 1, 0, keys);
  }
  step.need_weights = full.need_weights;
  step.average_attn_weights = full.average_attn_weights;
  return step;
}

struct DecodeParam {
  std::string fixture;
  int64_t first_chunk;  // prefill size
  int64_t step;         // tokens per later step
  std::string device;   // "cpu", or "cuda" when this build sees a GPU (testing::TestDevices)
};
// Readable in test listings (ctest prints GetParam()) instead of the struct's bytes.
void PrintTo(const DecodeParam& p, std::ostream* os) {
  *os << p.fixture << ": prefill " << p.first_chunk << ", then " << p.step << " per step on "
      << p.device;
}

class SelfDecodeTest : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(SelfDecodeTest, StepwiseEqualsOneFullCausalForward) {
  const DecodeParam& param = GetParam();
  auto c = testing::LoadFixtureCase(param.fixture);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->inputs.is_causal && !c->inputs.key.defined()) << "a causal self-attention case";
  auto model = LoadCaseModel(*c, param.device);
  ASSERT_NE(model, nullptr);
  const MhaOptions& o = model->options();
  const int64_t extra = (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  const int64_t b = c->inputs.query.size(0), total = c->inputs.query.size(1);
  KvCache cache(MakeKvPool(*model), b);
  int64_t p = 0;
  for (int64_t n : Chunks(total, param.first_chunk, param.step)) {
    SCOPED_TRACE("tokens " + std::to_string(p) + ".." + std::to_string(p + n - 1));
    StepInputs step = StepOf(c->inputs, p, n, p + n);
    ASSERT_TRUE(CheckStepInputs(o, cache, false, step).ok());
    ASSERT_TRUE(cache.Reserve(n).ok());
    ForwardOutputs out;
    Status status = DecodeStep(*model, &cache, false, step, &out);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(cache.length(), p + n);
    EXPECT_TRUE(TensorsNear(out.output, c->expected_output.narrow(1, p, n), kFp32Tolerance));
    if (step.need_weights) {
      EXPECT_TRUE(TensorsNear(out.attn_weights,
                              ExpectedWeights(c->expected_weights, p, n, p + n, extra),
                              kFp32Tolerance));
    }
    p += n;
  }
  EXPECT_EQ(cache.blocks_held(), b * ((total + 3) / 4));  // block size 4: grown block by block
}

std::vector<DecodeParam> SelfParams() {
  std::vector<DecodeParam> params;
  for (const std::string& device : testing::TestDevices()) {
    for (const char* name : {"decode_causal", "causal", "causal_kpm", "causal_mask_kpm",
                             "decode_causal_bias_kv_zero_attn"}) {
      params.push_back({name, 1, 1, device});    // one token per step
      params.push_back({name, 5, 1, device});    // chunked prefill, then single tokens
      params.push_back({name, 3, 2, device});    // chunks throughout
      params.push_back({name, 100, 1, device});  // everything in one step
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<DecodeParam>& info) {
  const DecodeParam& p = info.param;
  return p.fixture + "_first" + std::to_string(p.first_chunk) + "_step" + std::to_string(p.step) +
         (p.device == "cpu" ? "" : "_" + p.device);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SelfDecodeTest, ::testing::ValuesIn(SelfParams()), ParamName);

class CrossDecodeTest : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(CrossDecodeTest, StepwiseOverProjectedEncoderKeysEqualsFullForward) {
  const DecodeParam& param = GetParam();
  auto c = testing::LoadFixtureCase(param.fixture);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->inputs.key.defined() && !c->inputs.is_causal) << "a cross-attention case";
  auto model = LoadCaseModel(*c, param.device);
  ASSERT_NE(model, nullptr);
  const MhaOptions& o = model->options();
  const int64_t extra = (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  const int64_t b = c->inputs.query.size(0), total = c->inputs.query.size(1);
  const int64_t s = c->inputs.key.size(1);
  KvCache cache(MakeKvPool(*model), b);
  Status prefill = PrefillCross(*model, &cache, c->inputs.key, c->inputs.value);
  ASSERT_TRUE(prefill.ok()) << prefill.ToString();
  const int64_t blocks = cache.blocks_held();
  int64_t p = 0;
  for (int64_t n : Chunks(total, param.first_chunk, param.step)) {
    StepInputs step = StepOf(c->inputs, p, n, s);
    ASSERT_TRUE(CheckStepInputs(o, cache, true, step).ok());
    ForwardOutputs out;
    ASSERT_TRUE(DecodeStep(*model, &cache, true, step, &out).ok());
    EXPECT_TRUE(TensorsNear(out.output, c->expected_output.narrow(1, p, n), kFp32Tolerance));
    if (step.need_weights) {
      EXPECT_TRUE(TensorsNear(
          out.attn_weights, ExpectedWeights(c->expected_weights, p, n, s, extra), kFp32Tolerance));
    }
    p += n;
  }
  EXPECT_EQ(cache.length(), s);  // the encoder's keys only: steps add nothing
  EXPECT_EQ(cache.blocks_held(), blocks);
}

std::vector<DecodeParam> CrossParams() {
  std::vector<DecodeParam> params;
  for (const std::string& device : testing::TestDevices()) {
    for (const char* name : {"cross_attention", "kdim_vdim", "kdim_vdim_nobias",
                             "bias_kv_zero_attn_kpm", "attn_mask_3d_float", "kpm_bool"}) {
      params.push_back({name, 1, 1, device});
      params.push_back({name, 3, 1, device});
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CrossDecodeTest, ::testing::ValuesIn(CrossParams()), ParamName);

// Every session decodes the fixture's sequence, so each answer is checked against its rows.
void DecodeStaggeredWithWeights(const FixtureCase& c, const MhaModel& model) {
  testing::DecodeStaggered(
      MakeKvPool(model), c.inputs.query.size(1), 3,
      [&](int64_t p, int64_t n) { return StepOf(c.inputs, p, n, p + n); },
      [&](const std::vector<StepItem>& items) { ASSERT_TRUE(DecodeSteps(model, items).ok()); },
      [&](int i, int64_t p, int64_t n, const ForwardOutputs& out) {
        EXPECT_TRUE(TensorsNear(out.output, c.expected_output.narrow(1, p, n), kFp32Tolerance))
            << "session " << i << " rows from " << p;
        EXPECT_TRUE(TensorsNear(
            out.attn_weights, ExpectedWeights(c.expected_weights, p, n, p + n, 0), kFp32Tolerance));
      });
}

TEST(DecodeBatch, SessionsOfDifferentLengthsInOnePassEqualEachAlone) {
  auto c = testing::LoadFixtureCase("decode_causal");
  ASSERT_TRUE(c.ok());
  for (const std::string& device : testing::TestDevices()) {
    SCOPED_TRACE(device);
    auto model = LoadCaseModel(*c, device);
    ASSERT_NE(model, nullptr);
    DecodeStaggeredWithWeights(*c, *model);
  }
}

// The padded variant (one batched attention over caches padded to the longest) gives the same
// numbers as the per-session gather.
TEST(DecodeBatch, PaddedAttentionEqualsPerSession) {
  auto c = testing::LoadFixtureCase("decode_causal");
  ASSERT_TRUE(c.ok());
  auto model = LoadCaseModel(*c, "cpu");
  ASSERT_NE(model, nullptr);
  auto pool = MakeKvPool(*model);
  ForwardInputs full = c->inputs;
  full.need_weights = false;  // kPadded applies to steps without weights or masks
  const int64_t total = full.query.size(1);
  constexpr int kSessions = 3;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<int64_t> done;
  for (int i = 0; i < kSessions; ++i) {  // session i prefilled with 2 + 3 * i tokens
    caches.push_back(std::make_unique<KvCache>(pool, 2));
    const int64_t n = 2 + 3 * i;
    StepInputs prefill = StepOf(full, 0, n, n);
    ASSERT_TRUE(caches[i]->Reserve(n).ok());
    ForwardOutputs out;
    ASSERT_TRUE(DecodeStep(*model, caches[i].get(), false, prefill, &out).ok());
    done.push_back(n);
  }
  for (int round = 0; done.back() < total; ++round) {
    std::vector<StepInputs> steps(kSessions);
    std::vector<ForwardOutputs> outs(kSessions);
    std::vector<StepItem> items;
    for (int i = 0; i < kSessions; ++i) {
      steps[i] = StepOf(full, done[i], 1, done[i] + 1);
      ASSERT_TRUE(caches[i]->Reserve(1).ok());
      items.push_back(StepItem{caches[i].get(), false, &steps[i], &outs[i]});
    }
    ASSERT_TRUE(DecodeSteps(*model, items, StepAttention::kPadded).ok());
    for (int i = 0; i < kSessions; ++i) {
      EXPECT_TRUE(
          TensorsNear(outs[i].output, c->expected_output.narrow(1, done[i], 1), kFp32Tolerance))
          << "session " << i << " round " << round;
      ++done[i];
    }
  }
}

TEST(KvPool, GrowsBlockByBlockRefusesWhenFullAndTakesBlocksBackOnRelease) {
  auto c = testing::LoadFixtureCase("decode_causal");  // E=32 float32: 256 bytes per token
  ASSERT_TRUE(c.ok());
  auto model = LoadCaseModel(*c, "cpu");
  ASSERT_NE(model, nullptr);
  auto pool = MakeKvPool(*model, /*block_tokens=*/4, /*bytes=*/10 * 4 * 256 + 100);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->total_blocks(), 10);
  EXPECT_EQ(pool->block_bytes(), 4 * 256);
  EXPECT_EQ(pool->bytes_per_token(), 2 * 32 * 4);
  {
    KvCache a(pool, 2);
    ASSERT_TRUE(a.Reserve(1).ok());
    EXPECT_EQ(pool->used_blocks(), 2);  // one block per row
    a.Append(at::randn({2, 1, 32}), at::randn({2, 1, 32}));
    ASSERT_TRUE(a.Reserve(3).ok());
    EXPECT_EQ(pool->used_blocks(), 2);  // positions 1..3 fit in the first blocks
    ASSERT_TRUE(a.Reserve(4).ok());
    EXPECT_EQ(pool->used_blocks(), 4);
    KvCache b(pool, 3);
    Status full = b.Reserve(9);  // 3 blocks per row = 9 > 6 free
    EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
    EXPECT_TRUE(testing::Contains(full.message(), "9 blocks needed, 6 of 10 free"));
    EXPECT_EQ(pool->used_blocks(), 4) << "a refused reservation takes nothing";
    ASSERT_TRUE(b.Reserve(8).ok());
    EXPECT_EQ(pool->free_blocks(), 0);
  }
  EXPECT_EQ(pool->used_blocks(), 0) << "destroyed caches return every block";
  auto none = KvBlockPool::Create(KvPoolOptions{100, 4}, *model);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::Contains(none.status().message(), "--kv-cache-bytes 100 holds no block"));
}

TEST(DecodeValidation, ShapesNameTheFieldAndTheNumbers) {
  auto c = testing::LoadFixtureCase("decode_causal");
  ASSERT_TRUE(c.ok());
  auto model = LoadCaseModel(*c, "cpu");
  ASSERT_NE(model, nullptr);
  const MhaOptions& o = model->options();
  KvCache cache(MakeKvPool(*model), 2);
  ASSERT_TRUE(cache.Reserve(3).ok());
  cache.Append(at::randn({2, 3, 32}), at::randn({2, 3, 32}));
  StepInputs step;
  step.query = at::randn({3, 1, 32});
  Status s = CheckStepInputs(o, cache, false, step);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::Contains(s.message(), "query: expected shape [2, T >= 1, 32]"));
  EXPECT_TRUE(testing::Contains(s.message(), "got [3, 1, 32]"));
  step.query = at::randn({2, 2, 32});
  step.key_padding_mask = at::zeros({2, 2}, at::kBool);
  s = CheckStepInputs(o, cache, false, step);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::Contains(s.message(), "key_padding_mask: expected shape [2, 5]"));
  EXPECT_TRUE(testing::Contains(s.message(), "3 cached + 2 new tokens"));
  step.key_padding_mask = at::Tensor();
  step.attn_mask = at::zeros({2, 4});
  s = CheckStepInputs(o, cache, false, step);
  EXPECT_TRUE(testing::Contains(s.message(), "attn_mask: expected shape [2, 5] or [8, 2, 5]"));
  KvCache cross(MakeKvPool(*model), 2);
  s = PrefillCross(*model, &cross, at::randn({2, 6, 32}), at::randn({2, 5, 32}));
  EXPECT_TRUE(testing::Contains(s.message(), "sequence lengths differ (6 vs 5)"));
}

}  // namespace decode_test
}  // namespace mha
