// The default device warm-up on a CUDA device (issue 46); every test skips without one. WarmUp
// runs the plan (kinds/multihead/warmup_plan.h) on a version whose config.json has no "warmup", and
// the plan's graph buckets are captured once per version: merged passes of every bucket from other
// threads (each worker thread has its own pool stream, as the instances do) replay them, no
// further capture, and answer as the eager model does. scripts/gpu-check.sh's ctest step runs it.
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "mha/cuda_graphs.h"
#include "mha/engine.h"
#include "mha/model.h"
#include "server/serving/kinds/multihead/warmup_plan.h"
#include "server/serving/kinds/warmup.h"
#include "server/serving/repository/default_model.h"

namespace mha::serve {
namespace {

BatcherOptions Scheduler() {
  BatcherOptions o;
  o.max_batch_rows = 64;
  o.max_batch_tokens = 2048;
  o.instances = 2;
  return o;
}

GraphLimits LimitsOf(const ModelInfo& info) {
  return {info.cuda_graph_max_tokens, info.cuda_graph_max_graphs, info.cuda_graphs_shared};
}

StatusOr<LoadedModel> Builtin(bool graphs) {
  MhaOptions options;
  options.embed_dim = kDefaultEmbedDim;
  options.num_heads = kDefaultNumHeads;
  options.device = "cuda";
  options.cuda_graphs = graphs;
  return BuildDefaultModel(options);
}

StatusOr<HostOutputs> Pass(const MhaModel& model, int64_t batch, int64_t seq) {
  HostInputs in;
  in.query = WarmupRamp(batch, seq, kDefaultEmbedDim);
  return Forward(model, in, OutputTypes{});
}

double MaxAbsDiff(const HostTensor& a, const HostTensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  const float* x = reinterpret_cast<const float*>(a.data());
  const float* y = reinterpret_cast<const float*>(b.data());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::fabs(double{x[i]} - y[i]));
  return worst;
}

TEST(DeviceWarmup, TheDefaultOnADeviceRunsThePlan) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  LoadOverrides overrides;
  overrides.device = "cuda";
  ModelEntry entry = MakeDefaultModel(overrides);
  ASSERT_EQ(entry.state, ModelState::kReady) << entry.error;
  WarmUp(&entry, Scheduler());
  ASSERT_EQ(entry.state, ModelState::kReady) << entry.error;
  const DeviceWarmupPlan plan = PlanDeviceWarmup(Scheduler(), LimitsOf(entry.info));
  EXPECT_EQ(entry.warmup_passes, static_cast<int64_t>(plan.passes.size()) + 1);  // + weights
  if (CudaGraphCache::SharedAcrossStreams()) {
    EXPECT_GT(plan.graph_passes, 0);
  }
}

TEST(DeviceWarmup, GraphsAreCapturedOncePerVersionForEveryStream) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  auto graphed = Builtin(true), eager = Builtin(false);
  ASSERT_TRUE(graphed.ok()) << graphed.status().ToString();
  ASSERT_TRUE(eager.ok()) << eager.status().ToString();
  const CudaGraphCache* cache = graphed->model->cuda_graph_cache();
  if (cache == nullptr || !cache->Enabled() || !CudaGraphCache::SharedAcrossStreams()) {
    GTEST_SKIP() << "this build captures no graphs shared by the streams";
  }
  const DeviceWarmupPlan plan = PlanDeviceWarmup(Scheduler(), LimitsOf(graphed->info));
  ASSERT_GT(plan.graph_passes, 0);
  for (const WarmupShape& s : plan.passes) {
    ASSERT_TRUE(Pass(*graphed->model, s.batch, s.seq).ok()) << s.batch << " x " << s.seq;
  }
  EXPECT_EQ(cache->captures(), plan.graph_passes);
  EXPECT_EQ(cache->size(), plan.graph_passes);
  // Two instances: each merged batch size of each bucket (the smallest and the largest real
  // batch that pads to it), on two threads at once.
  std::atomic<int> wrong{0};
  auto instance = [&] {
    for (int64_t i = 0; i < plan.graph_passes; ++i) {
      const WarmupShape& s = plan.passes[static_cast<size_t>(i)];
      for (int64_t batch : {s.batch == 1 ? int64_t{1} : s.batch / 2 + 1, s.batch}) {
        auto got = Pass(*graphed->model, batch, s.seq);
        auto want = Pass(*eager->model, batch, s.seq);
        if (!got.ok() || !want.ok() || MaxAbsDiff(got->output, want->output) > 1e-4) ++wrong;
      }
    }
  };
  std::thread a(instance), b(instance);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(cache->captures(), plan.graph_passes) << "a graph was captured again";
  EXPECT_EQ(cache->size(), plan.graph_passes);
}

}  // namespace
}  // namespace mha::serve
