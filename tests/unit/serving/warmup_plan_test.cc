// PlanDeviceWarmup (kinds/multihead/warmup_plan.h): which shapes the default device warm-up runs,
// that they are deduplicated and bounded, that every merged shape of the grid is either warmed
// eagerly or replays a planned graph, and that the plan does not grow with the instances (graphs
// are shared by every instance stream).
#include "server/serving/kinds/multihead/warmup_plan.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace mha::serve {
namespace {

constexpr GraphLimits kSharedGraphs{4096, 32, true};  // mha::CudaGraphOptions' defaults, 2.x

int64_t Pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

BatcherOptions Scheduler(int64_t rows, int64_t tokens) {
  BatcherOptions o;
  o.max_batch_rows = rows;
  o.max_batch_tokens = tokens;
  return o;
}

// The passes as (B, T, need_weights), in order.
std::vector<std::tuple<int64_t, int64_t, bool>> Passes(const DeviceWarmupPlan& plan) {
  std::vector<std::tuple<int64_t, int64_t, bool>> passes;
  for (const WarmupShape& s : plan.passes) passes.emplace_back(s.batch, s.seq, s.need_weights);
  return passes;
}

std::set<std::pair<int64_t, int64_t>> Shapes(const DeviceWarmupPlan& plan) {
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const WarmupShape& s : plan.passes) shapes.insert({s.batch, s.seq});
  return shapes;
}

// Every merged pass [B, T] of the grid (T a length-bucket edge up to 64, B x T within the tokens)
// is one of the plan's eager passes, or pads to one of its graph buckets, or takes the graph path
// (graphs on, padded B x T within the graph's tokens: captured at its first use).
void ExpectCovers(const DeviceWarmupPlan& plan, int64_t rows, int64_t tokens,
                  const GraphLimits& limits) {
  std::set<std::pair<int64_t, int64_t>> graphs, eager;
  for (size_t i = 0; i < plan.passes.size(); ++i) {
    const WarmupShape& s = plan.passes[i];
    (static_cast<int64_t>(i) < plan.graph_passes ? graphs : eager).insert({s.batch, s.seq});
  }
  for (int64_t len = 8; len <= 64; len += 8) {
    for (int64_t b = 1; b <= rows && b * len <= tokens; ++b) {
      const bool graph_path = limits.max_graphs > 0 && Pow2(b) * len <= limits.max_tokens;
      EXPECT_TRUE(graph_path ? eager.count({b, len}) == 0 : eager.count({b, len}) == 1)
          << "[" << b << ", " << len << "]";
      if (!graph_path) {
        EXPECT_EQ(graphs.count({Pow2(b), len}), 0u);
      }
    }
  }
}

TEST(PlanDeviceWarmup, GraphBucketsAtHalfTheBound) {
  const DeviceWarmupPlan plan = PlanDeviceWarmup(Scheduler(64, 2048), kSharedGraphs);
  // T = 8 and 16 x B = 1..64 (14 buckets), then T = 24 x B = 1, 2: 16 graphs, half the bound;
  // every other merged pass of the grid fits 4096 tokens padded: captured at its first use.
  EXPECT_EQ(plan.graph_passes, 16);
  EXPECT_EQ(plan.eager_passes, 0);
  EXPECT_EQ(plan.dropped, 0);
  ASSERT_EQ(plan.passes.size(), 16u);
  EXPECT_EQ(plan.passes[0].batch, 1);
  EXPECT_EQ(plan.passes[0].seq, 8);
  EXPECT_EQ(plan.passes[6].batch, 64);
  EXPECT_EQ(plan.passes[15].batch, 2);
  EXPECT_EQ(plan.passes[15].seq, 24);
  EXPECT_EQ(Shapes(plan).size(), plan.passes.size()) << "duplicates";
  for (const WarmupShape& s : plan.passes) EXPECT_FALSE(s.need_weights);
  ExpectCovers(plan, 64, 2048, kSharedGraphs);
  EXPECT_EQ(plan.Describe({}), "16 graph buckets + 0 eager shapes");
}

TEST(PlanDeviceWarmup, WithoutGraphsTheEagerGridIsCappedAtMaxPasses) {
  const DeviceWarmupPlan all = PlanDeviceWarmup(Scheduler(64, 2048), GraphLimits{});
  // 64 + 64 + 64 + 64 + 51 + 42 + 36 + 32 shapes.
  EXPECT_EQ(all.graph_passes, 0);
  EXPECT_EQ(all.eager_passes, 417);
  EXPECT_EQ(all.dropped, 0);
  EXPECT_EQ(Shapes(all).size(), all.passes.size()) << "duplicates";
  for (const WarmupShape& s : all.passes) EXPECT_LE(s.batch * s.seq, 2048);
  ExpectCovers(all, 64, 2048, GraphLimits{});
  DeviceWarmupOptions narrow;
  narrow.max_passes = 256;
  const DeviceWarmupPlan off = PlanDeviceWarmup(Scheduler(64, 2048), GraphLimits{}, narrow);
  EXPECT_EQ(off.eager_passes, 256);
  EXPECT_EQ(off.dropped, 417 - 256);
  EXPECT_EQ(off.passes.back().batch, 64);
  EXPECT_EQ(off.passes.back().seq, 32);
  EXPECT_EQ(off.Describe(narrow), "0 graph buckets + 256 eager shapes (161 past the bound of 256)");
}

// LibTorch 1.13 captures a graph per stream: a warm-up on the loading thread's stream would spend
// the bound on graphs no instance replays, so none are planned, and no eager pass that would be
// captured either.
TEST(PlanDeviceWarmup, GraphsPerStreamAreNotPlanned) {
  GraphLimits per_stream = kSharedGraphs;
  per_stream.shared = false;
  EXPECT_TRUE(PlanDeviceWarmup(Scheduler(64, 2048), per_stream).passes.empty());
  per_stream.max_tokens = 256;  // larger passes run eagerly: those are warmed
  const DeviceWarmupPlan plan = PlanDeviceWarmup(Scheduler(64, 2048), per_stream);
  EXPECT_EQ(plan.graph_passes, 0);
  EXPECT_GT(plan.eager_passes, 0);
  ExpectCovers(plan, 64, 2048, per_stream);
}

TEST(PlanDeviceWarmup, MaxBatchTokensBoundsTheGrid) {
  const DeviceWarmupPlan plan = PlanDeviceWarmup(Scheduler(64, 64), kSharedGraphs);
  // T=8: B pads to 1, 2, 4, 8; T=16: 1, 2, 4; T=24, 32: 1, 2; T=40..64: 1: every merged pass.
  EXPECT_EQ(plan.graph_passes, 4 + 3 + 2 + 2 + 4);
  EXPECT_EQ(plan.eager_passes, 0);
  for (int64_t len = 8; len <= 64; len += 8) {
    for (int64_t b = 1; b * len <= 64; ++b) {
      EXPECT_EQ(Shapes(plan).count({Pow2(b), len}), 1u) << b << " x " << len;
    }
  }
}

TEST(PlanDeviceWarmup, HalfTheModelsGraphBoundIsLeftForTraffic) {
  const DeviceWarmupPlan plan = PlanDeviceWarmup(Scheduler(64, 2048), GraphLimits{4096, 4, true});
  EXPECT_EQ(plan.graph_passes, 2);  // T=8, B = 1, 2
  EXPECT_EQ(plan.passes.size(), 2u);
  DeviceWarmupOptions four;
  four.max_graphs = 4;
  EXPECT_EQ(PlanDeviceWarmup(Scheduler(64, 2048), kSharedGraphs, four).graph_passes, 4);
}

TEST(PlanDeviceWarmup, PassesOverTheGraphTokensAreWarmedEagerly) {
  // Padded B x T at most 256 tokens: T=8 buckets up to B=32, T=64 up to B=4; larger merges run
  // eagerly, so the plan warms them.
  DeviceWarmupOptions wide;
  wide.max_graphs = 64;  // half of 64: room for all 31 buckets
  const GraphLimits limits{256, 64, true};
  const DeviceWarmupPlan plan = PlanDeviceWarmup(Scheduler(64, 2048), limits, wide);
  EXPECT_EQ(plan.dropped, 0);
  EXPECT_EQ(plan.graph_passes, 6 + 5 + 4 + 4 + 3 + 3 + 3 + 3);
  EXPECT_EQ(plan.eager_passes, 32 + 48 + 56 + 56 + 47 + 38 + 32 + 28);
  for (int64_t i = 0; i < plan.graph_passes; ++i) {
    EXPECT_LE(plan.passes[i].batch * plan.passes[i].seq, 256);
  }
  ExpectCovers(plan, 64, 2048, limits);
}

TEST(PlanDeviceWarmup, BatchingOffWarmsOneRow) {
  BatcherOptions off = Scheduler(64, 2048);
  off.batching = false;
  const DeviceWarmupPlan plan = PlanDeviceWarmup(off, kSharedGraphs);
  EXPECT_EQ(plan.graph_passes, 8);  // B=1 at T = 8, 16, ..., 64
  EXPECT_EQ(plan.eager_passes, 0);
  EXPECT_EQ(PlanDeviceWarmup(off, GraphLimits{}).eager_passes, 8);
}

TEST(PlanDeviceWarmup, TheInstancesShareOnePlan) {
  BatcherOptions one = Scheduler(64, 2048), four = one;
  four.instances = 4;
  EXPECT_EQ(Passes(PlanDeviceWarmup(one, kSharedGraphs)),
            Passes(PlanDeviceWarmup(four, kSharedGraphs)));
  EXPECT_EQ(Passes(PlanDeviceWarmup(one, GraphLimits{})),
            Passes(PlanDeviceWarmup(four, GraphLimits{})));
}

}  // namespace
}  // namespace mha::serve
