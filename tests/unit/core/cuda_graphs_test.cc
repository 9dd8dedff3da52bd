// mha/cuda_graphs.h: the batch buckets and the CPU's "never" always; on CUDA (when at::hasCUDA()
// and the build captures graphs, else skipped) graph replays equal the eager pass of the same
// weights (fp32 within 1e-5, fp16 within the half-precision bound), one graph per bucket and
// stream, and the passes a graph cannot serve stay eager.
#include "mha/cuda_graphs.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "mha/model.h"
#include "test_util.h"

namespace mha {
namespace cuda_graphs_test {

using testing::TensorsNear;

constexpr int64_t kEmbed = 128;
constexpr int64_t kHeads = 4;

MhaWeights RandomWeights() {
  at::manual_seed(5);
  MhaWeights w;
  for (at::Tensor* t : {&w.q_weight, &w.k_weight, &w.v_weight, &w.out_weight}) {
    *t = at::randn({kEmbed, kEmbed}) * 0.05;
  }
  for (at::Tensor* t : {&w.q_bias, &w.k_bias, &w.v_bias, &w.out_bias}) {
    *t = at::randn({kEmbed}) * 0.05;
  }
  return w;
}

std::unique_ptr<MhaModel> MakeModel(const std::string& device, bool graphs,
                                    DType dtype = DType::kFloat32) {
  MhaOptions o;
  o.embed_dim = kEmbed;
  o.num_heads = kHeads;
  o.device = device;
  o.dtype = dtype;
  o.cuda_graphs = graphs;
  auto model = MhaModel::Create(o, RandomWeights());
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

// Whether this binary can run the CUDA cases: a device, and a build that captures graphs.
bool GraphsAvailable() { return at::hasCUDA() && CudaGraphCache(CudaGraphOptions()).Enabled(); }
#define MHA_SKIP_WITHOUT_GRAPHS() \
  if (!GraphsAvailable()) GTEST_SKIP() << "no CUDA device, or built without MHA_CUDA_GRAPHS"

TEST(CudaGraphCache, BatchesArePaddedToPowersOfTwo) {
  EXPECT_EQ(CudaGraphCache::BucketBatch(1), 1);
  EXPECT_EQ(CudaGraphCache::BucketBatch(2), 2);
  EXPECT_EQ(CudaGraphCache::BucketBatch(3), 4);
  EXPECT_EQ(CudaGraphCache::BucketBatch(8), 8);
  EXPECT_EQ(CudaGraphCache::BucketBatch(9), 16);
}

TEST(CudaGraphCache, NeverOnTheCpu) {
  CudaGraphCache cache{CudaGraphOptions()};
  int passes = 0;
  const at::Tensor out = cache.Run(at::randn({2, 4, kEmbed}), false, [&](const at::Tensor& q) {
    ++passes;
    return q;
  });
  EXPECT_FALSE(out.defined());
  EXPECT_EQ(passes, 0);
  EXPECT_EQ(cache.size(), 0);
  auto model = MakeModel("cpu", /*graphs=*/true);
  ASSERT_NE(model, nullptr);
  ForwardInputs in;
  in.query = at::randn({2, 4, kEmbed});
  ForwardOutputs result;
  ASSERT_TRUE(model->Forward(in, &result).ok());
  EXPECT_EQ(model->cuda_graphs_captured(), 0);
}

TEST(CudaGraphCache, DisabledByItsOptions) {
  CudaGraphOptions options;
  options.enabled = false;
  EXPECT_FALSE(CudaGraphCache(options).Enabled());
  options.enabled = true;
  options.max_graphs = 0;
  EXPECT_FALSE(CudaGraphCache(options).Enabled());
}

// Replays equal the eager model for batches 1..5 (buckets 1, 2, 4, 8), causal and not, with the
// query on the device and on the host; every call replays (twice per shape: the second call
// reuses the graph captured by the first).
TEST(CudaGraphCache, ReplaysEqualTheEagerPassFp32) {
  MHA_SKIP_WITHOUT_GRAPHS();
  auto graphed = MakeModel("cuda", true), eager = MakeModel("cuda", false);
  ASSERT_NE(graphed, nullptr);
  ASSERT_NE(eager, nullptr);
  for (bool causal : {false, true}) {
    for (int64_t batch = 1; batch <= 5; ++batch) {
      for (bool host : {true, false}) {
        ForwardInputs in;
        in.query =
            at::randn({batch, 16, kEmbed}, at::TensorOptions().device(host ? at::kCPU : at::kCUDA));
        in.is_causal = causal;
        ForwardOutputs want, got, again;
        ASSERT_TRUE(eager->Forward(in, &want).ok());
        ASSERT_TRUE(graphed->Forward(in, &got).ok());
        ASSERT_TRUE(graphed->Forward(in, &again).ok());
        EXPECT_EQ(got.output.is_cuda(), !host);
        EXPECT_TRUE(TensorsNear(got.output.cpu(), want.output.cpu(), testing::kFp32Tolerance))
            << "batch " << batch << " causal " << causal << " host " << host;
        EXPECT_TRUE(at::equal(got.output.cpu(), again.output.cpu()));
      }
    }
  }
  // Buckets 1, 2, 4 and 8 at T=16, causal and not, on this thread's one stream.
  EXPECT_EQ(graphed->cuda_graphs_captured(), 8);
  EXPECT_EQ(eager->cuda_graphs_captured(), 0);
}

TEST(CudaGraphCache, ReplaysEqualTheEagerPassFp16) {
  MHA_SKIP_WITHOUT_GRAPHS();
  auto graphed = MakeModel("cuda", true, DType::kFloat16);
  auto eager = MakeModel("cuda", false, DType::kFloat16);
  ASSERT_NE(graphed, nullptr);
  ASSERT_NE(eager, nullptr);
  ForwardInputs in;
  in.query = at::randn({3, 32, kEmbed}).to(at::kHalf);
  ForwardOutputs want, got;
  ASSERT_TRUE(eager->Forward(in, &want).ok());
  ASSERT_TRUE(graphed->Forward(in, &got).ok());
  EXPECT_EQ(got.output.scalar_type(), at::kHalf);
  EXPECT_TRUE(TensorsNear(got.output.to(at::kFloat), want.output.to(at::kFloat), 2e-3));
  EXPECT_EQ(graphed->cuda_graphs_captured(), 1);
}

// Weights, masks, cross-attention inputs and shapes over max_tokens run eagerly: no capture.
TEST(CudaGraphCache, IneligiblePassesStayEager) {
  MHA_SKIP_WITHOUT_GRAPHS();
  auto graphed = MakeModel("cuda", true), eager = MakeModel("cuda", false);
  ASSERT_NE(graphed, nullptr);
  ForwardInputs weights;
  weights.query = at::randn({2, 16, kEmbed});
  weights.need_weights = true;
  ForwardInputs masked = weights;
  masked.need_weights = false;
  masked.key_padding_mask = at::zeros({2, 16}, at::kBool);
  ForwardInputs big;
  big.query = at::randn({2, 4096, kEmbed});  // 2 x 4096 tokens > max_tokens 4096
  for (const ForwardInputs* in : {&weights, &masked, &big}) {
    ForwardOutputs want, got;
    ASSERT_TRUE(eager->Forward(*in, &want).ok());
    ASSERT_TRUE(graphed->Forward(*in, &got).ok());
    EXPECT_TRUE(TensorsNear(got.output, want.output, testing::kFp32Tolerance));
  }
  EXPECT_EQ(graphed->cuda_graphs_captured(), 0);
}

// Two threads (each its own pool stream) get the same answers from one bucket: one graph shared
// by both streams with LibTorch 2.x (captured once), one graph each with 1.13.
TEST(CudaGraphCache, OneGraphPerBucketForEveryStream) {
  MHA_SKIP_WITHOUT_GRAPHS();
  auto graphed = MakeModel("cuda", true), eager = MakeModel("cuda", false);
  ASSERT_NE(graphed, nullptr);
  ForwardInputs in;
  in.query = at::randn({4, 8, kEmbed});
  ForwardOutputs want;
  ASSERT_TRUE(eager->Forward(in, &want).ok());
  ForwardOutputs got[2];
  bool ok[2] = {false, false};
  std::thread a([&] { ok[0] = graphed->Forward(in, &got[0]).ok(); });
  std::thread b([&] { ok[1] = graphed->Forward(in, &got[1]).ok(); });
  a.join();
  b.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ok[i]);
    EXPECT_TRUE(TensorsNear(got[i].output, want.output, testing::kFp32Tolerance));
  }
  const int64_t graphs = CudaGraphCache::SharedAcrossStreams() ? 1 : 2;
  EXPECT_EQ(graphed->cuda_graphs_captured(), graphs);
  EXPECT_EQ(graphed->cuda_graph_cache()->captures(), graphs);
}

}  // namespace cuda_graphs_test
}  // namespace mha
