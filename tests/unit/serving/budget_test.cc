// The work estimate (server/serving/budget.h) per attention path, docs/core.md "What
// --max-work-bytes counts": on the CPU three blocks of scores whose rows come from the core's own
// AttentionBlockRows (quadratic only when one block holds them, as before), the weights asked for
// one whole copy; on a device the fused kernel's mask and row statistics, or the whole scores when
// probabilities are formed.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mha/options.h"
#include "server/serving/kinds/multihead/pass_cost.h"

namespace mha::serve {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

ModelInfo Model(const char* device, int64_t embed, int64_t heads) {
  ModelInfo model;
  model.options.embed_dim = embed;
  model.options.num_heads = heads;
  model.device = device;
  return model;
}

HostInputs Query(int64_t b, int64_t t, int64_t e) {
  HostInputs in;
  in.query = HostTensor::FromFloats({b, t, e}, std::vector<float>(static_cast<size_t>(b * t * e)));
  return in;
}

// rows * (3T + 4S) * E * c: the projections and outputs every path has.
int64_t Projections(int64_t rows, int64_t t, int64_t s, int64_t e) {
  return rows * (3 * t + 4 * s) * e * 4;
}

TEST(PassWorkBytes, OneBlockOnTheCpuIsTheWholeScoresAsBefore) {
  PassShape pass = ModelPassShape(Model("cpu", 64, 4), 2, 16, 16);
  const int64_t whole = 2 * 4 * 16 * 16 * 4;
  EXPECT_EQ(PassWorkBytes(pass), Projections(2, 16, 16, 64) + 3 * whole);
  pass.head_options = pass.need_weights = true;
  EXPECT_EQ(PassWorkBytes(pass), Projections(2, 16, 16, 64) + 4 * whole);
}

TEST(PassWorkBytes, LongSequencesOnTheCpuCountBlocksOfTheCoresRows) {
  const int64_t t = 8192, e = 512, h = 8;
  PassShape pass = ModelPassShape(Model("cpu", e, h), 1, t, t);
  // Output only: blocks of one head's rows; the contiguous q, k, v heads and the output buffer.
  const int64_t head_rows = AttentionBlockRows(1, 1, t, t, 4, kDefaultAttentionBlockBytes);
  ASSERT_LT(head_rows, t);
  const int64_t heads = (t + 2 * t) * e * 4;
  EXPECT_EQ(PassWorkBytes(pass), Projections(1, t, t, e) + heads + 3 * head_rows * t * 4);
  EXPECT_LT(PassWorkBytes(pass), 256 * kMiB);  // was 3 * H * T^2 * 4 = 6.4 GB
  // The probabilities wanted: blocks of every head's rows, and the weights one whole copy.
  pass.head_options = pass.need_weights = true;
  const int64_t rows = AttentionBlockRows(1, h, t, t, 4, kDefaultAttentionBlockBytes);
  ASSERT_LT(rows, head_rows);
  EXPECT_LE(h * rows * t * 4, kDefaultAttentionBlockBytes);
  EXPECT_EQ(PassWorkBytes(pass),
            Projections(1, t, t, e) + heads + 3 * h * rows * t * 4 + h * t * t * 4);
  pass.head_options = pass.need_weights = false;
  pass.block_bytes = 0;  // unblocked: quadratic again
  EXPECT_EQ(PassWorkBytes(pass), Projections(1, t, t, e) + 3 * h * t * t * 4);
}

TEST(PassWorkBytes, TheFusedKernelOnADeviceCountsItsMaskAndRowStatistics) {
  const int64_t t = 8192, e = 512, h = 8;
  PassShape pass = ModelPassShape(Model("cuda:0", e, h), 1, t, t);
  EXPECT_TRUE(pass.on_device);
  EXPECT_EQ(PassWorkBytes(pass), Projections(1, t, t, e) + h * t * 4);
  pass.mask_heads = 1;  // an additive [T, S] mask, whole
  EXPECT_EQ(PassWorkBytes(pass), Projections(1, t, t, e) + t * t * 4 + h * t * 4);
  pass.head_options = true;  // probabilities on a device: the whole scores, never blocked
  EXPECT_EQ(PassWorkBytes(pass), Projections(1, t, t, e) + 3 * h * t * t * 4);
}

TEST(EstimatePassCost, ACausalPassTheOldEstimateRefusedNowFits) {
  const int64_t t = 8192, e = 64, h = 2;
  HostInputs in = Query(1, t, e);
  in.is_causal = true;
  const PassCost cpu = EstimatePassCost(Model("cpu", e, h), DType::kFloat32, in);
  const int64_t old = Projections(1, t, t, e) + 3 * h * t * t * 4;  // 1.6 GB
  EXPECT_LT(cpu.work_bytes, 64 * kMiB);
  EXPECT_TRUE(CheckPassCost(cpu, in, int64_t{1} << 30, 64 * kMiB).ok());
  EXPECT_GT(old, 1000 * kMiB);
  // The same pass on a device: the kernel applies causality itself, no mask.
  const PassCost gpu = EstimatePassCost(Model("cuda:0", e, h), DType::kFloat32, in);
  EXPECT_EQ(gpu.work_bytes, Projections(1, t, t, e) + h * t * 4 + 2 * cpu.response_bytes);
}

TEST(EstimatePassCost, WeightsAreOneWholeCopyAndStillRefusedWhenTooBig) {
  const int64_t t = 8192, e = 64, h = 2;
  HostInputs in = Query(1, t, e);
  in.need_weights = true;
  in.average_attn_weights = false;
  const PassCost cost = EstimatePassCost(Model("cpu", e, h), DType::kFloat32, in);
  const int64_t weights = h * t * t * 4;
  EXPECT_GT(cost.work_bytes, weights);
  EXPECT_LT(cost.work_bytes, weights + 2 * cost.response_bytes + 64 * kMiB);
  const Status refused = CheckPassCost(cost, in, int64_t{4} << 30, 256 * kMiB);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--max-work-bytes 268435456"), std::string::npos)
      << refused.message();
}

}  // namespace
}  // namespace mha::serve
