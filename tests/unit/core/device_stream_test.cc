// mha/device_stream.h: a no-op on the CPU (the same tensors back, the same results); on CUDA (when
// at::hasCUDA(), else skipped) each thread's own pool stream, pinned staging both ways, forward
// passes from several threads equal to the CPU's, and the blocking DeviceWait (mha/runtime.h).
#include "mha/device_stream.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mha/model.h"
#include "mha/runtime.h"
#include "test_util.h"

#ifdef MHA_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mha {
namespace device_stream_test {

using testing::TensorsNear;

using testing::kFp32Tolerance;
constexpr int64_t kEmbed = 128;
constexpr int64_t kHeads = 4;

// [8, 128, 128] fp32 (512 KiB) is staged through pinned memory; [1, 4, 128] (2 KiB) is not.
at::Tensor BigQuery() { return at::randn({8, 128, kEmbed}); }
at::Tensor SmallQuery() { return at::randn({1, 4, kEmbed}); }
static_assert(int64_t{8} * 128 * kEmbed * 4 >= kPinnedStagingMinBytes, "BigQuery must be staged");

MhaWeights RandomWeights() {
  at::manual_seed(11);
  MhaWeights w;
  w.q_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.k_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.v_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.out_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.q_bias = at::randn({kEmbed}) * 0.05;
  w.k_bias = at::randn({kEmbed}) * 0.05;
  w.v_bias = at::randn({kEmbed}) * 0.05;
  w.out_bias = at::randn({kEmbed}) * 0.05;
  return w;
}

std::unique_ptr<MhaModel> MakeModel(const std::string& device, const MhaWeights& weights) {
  MhaOptions o;
  o.embed_dim = kEmbed;
  o.num_heads = kHeads;
  o.device = device;
  auto model = MhaModel::Create(o, weights);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

// Self-attention with per-head weights and a bool key padding mask (every input kind staged).
ForwardInputs MakeInputs(at::Tensor query) {
  ForwardInputs in;
  const int64_t batch = query.size(0), len = query.size(1);
  in.key_padding_mask = at::zeros({batch, len}, at::kBool);
  in.key_padding_mask.narrow(1, len - 1, 1).fill_(true);  // the last key ignored
  in.query = std::move(query);
  in.need_weights = true;
  in.average_attn_weights = false;
  return in;
}

// The process's DeviceWait for one test, the previous one restored after.
class DeviceWaitScope {
 public:
  explicit DeviceWaitScope(DeviceWait wait) : before_(GetDeviceWait()) { SetDeviceWait(wait); }
  ~DeviceWaitScope() { SetDeviceWait(before_); }
  DeviceWaitScope(const DeviceWaitScope&) = delete;
  DeviceWaitScope& operator=(const DeviceWaitScope&) = delete;

 private:
  DeviceWait before_;
};

TEST(DeviceWaitTest, ParsesSpinAndBlockAndNamesBothOtherwise) {
  EXPECT_EQ(ParseDeviceWait("spin").value(), DeviceWait::kSpin);
  EXPECT_EQ(ParseDeviceWait("block").value(), DeviceWait::kBlock);
  const auto bad = ParseDeviceWait("yield");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "device wait 'yield': spin or block");
  EXPECT_STREQ(DeviceWaitName(DeviceWait::kBlock), "block");
  EXPECT_STREQ(DeviceWaitName(DeviceWait::kSpin), "spin");
  const DeviceWait before = GetDeviceWait();
  ASSERT_TRUE(ConfigureThreads({1, 1, DeviceWait::kBlock}).ok());
  EXPECT_EQ(GetDeviceWait(), DeviceWait::kBlock);
  SetDeviceWait(before);
}

TEST(DeviceStreamCpuTest, ScopeAndStagingAreNoOps) {
  const c10::Device cpu(c10::kCPU);
  DeviceStreamScope scope(cpu);
  EXPECT_FALSE(scope.stream().has_value());
  scope.Synchronize();
  const at::Tensor t = BigQuery();
  EXPECT_TRUE(StageToDevice(t, cpu).is_same(t));
  EXPECT_TRUE(StageToHost(t).is_same(t));
  EXPECT_FALSE(StageToDevice(at::Tensor(), cpu).defined());
  EXPECT_FALSE(StageToHost(at::Tensor()).defined());
  SynchronizeCurrentStream(cpu);
  for (DeviceWait wait : {DeviceWait::kSpin, DeviceWait::kBlock}) {  // CPU tensors stay as they are
    DeviceWaitScope waiting(wait);
    const at::Tensor small = SmallQuery();
    EXPECT_TRUE(StageToDevice(small, cpu).is_same(small));
    EXPECT_TRUE(StageToHost(small).is_same(small));
    EXPECT_TRUE(CopyToHost(small).is_same(small));
    EXPECT_FALSE(CopyToHost(at::Tensor()).defined());
    scope.Synchronize();
  }
}

TEST(DeviceStreamCpuTest, IdsAndQueuedCopiesOnTheCpu) {
  const at::Tensor ids = IdsToDevice({3, 1, 2}, c10::Device(c10::kCPU));
  EXPECT_EQ(ids.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(ids, at::tensor(std::vector<int64_t>{3, 1, 2}, at::kLong)));
  EXPECT_EQ(IdsToDevice({}, c10::Device(c10::kCPU)).numel(), 0);
  const at::Tensor rows = SmallQuery();
  EXPECT_TRUE(CopyToDeviceQueued(rows, c10::Device(c10::kCPU)).is_same(rows));
}

TEST(DeviceStreamCpuTest, CpuForwardIdenticalInsideAScope) {
  auto model = MakeModel("cpu", RandomWeights());
  ASSERT_NE(model, nullptr);
  const ForwardInputs in = MakeInputs(BigQuery());
  ForwardOutputs plain, scoped;
  ASSERT_TRUE(model->Forward(in, &plain).ok());
  {
    DeviceStreamScope scope(c10::Device(c10::kCPU));
    ASSERT_TRUE(model->Forward(in, &scoped).ok());
  }
  EXPECT_TRUE(plain.output.is_cpu());
  EXPECT_TRUE(at::equal(plain.output, scoped.output));
  EXPECT_TRUE(at::equal(plain.attn_weights, scoped.attn_weights));
}

#ifdef MHA_WITH_CUDA
#define MHA_SKIP_WITHOUT_CUDA() \
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device"
#else
#define MHA_SKIP_WITHOUT_CUDA() GTEST_SKIP() << "built without CUDA (MHA_WITH_CUDA off)"
#endif

TEST(DeviceStreamCudaTest, EachThreadHasItsOwnPoolStream) {
  MHA_SKIP_WITHOUT_CUDA();
#ifdef MHA_WITH_CUDA
  const c10::Device gpu(c10::kCUDA, 0);
  const c10::Stream default_stream = c10::cuda::getDefaultCUDAStream(0);
  c10::Stream mine = default_stream;
  {
    DeviceStreamScope scope(gpu);
    ASSERT_TRUE(scope.stream().has_value());
    mine = *scope.stream();
    EXPECT_NE(mine, default_stream);
    EXPECT_EQ(c10::Stream(c10::cuda::getCurrentCUDAStream(0)), mine);
    DeviceStreamScope again(gpu);
    EXPECT_EQ(*again.stream(), mine) << "one stream per thread, not one per pass";
  }
  EXPECT_EQ(c10::Stream(c10::cuda::getCurrentCUDAStream(0)), default_stream) << "restored";
  c10::Stream other = default_stream;
  std::thread([&] { other = *DeviceStreamScope(gpu).stream(); }).join();
  EXPECT_NE(other, mine);
  EXPECT_NE(other, default_stream);
#endif
}

TEST(DeviceStreamCudaTest, StagingRoundTripThroughPinnedMemory) {
  MHA_SKIP_WITHOUT_CUDA();
  const c10::Device gpu(c10::kCUDA, 0);
  const at::Tensor big = BigQuery(), small = SmallQuery();
  DeviceStreamScope scope(gpu);
  const at::Tensor big_gpu = StageToDevice(big, gpu), small_gpu = StageToDevice(small, gpu);
  EXPECT_EQ(big_gpu.device(), gpu);
  EXPECT_EQ(small_gpu.device(), gpu);
  const at::Tensor big_back = StageToHost(big_gpu * 2), small_back = StageToHost(small_gpu * 2);
  scope.Synchronize();
  EXPECT_TRUE(big_back.is_cpu());
  EXPECT_TRUE(big_back.is_pinned());
  EXPECT_TRUE(small_back.is_cpu());
  EXPECT_FALSE(small_back.is_pinned());
  EXPECT_TRUE(at::equal(big_back, big * 2));
  EXPECT_TRUE(at::equal(small_back, small * 2));
}

// --device-wait block: small copies go through pinned buffers too, every wait sleeps on an event,
// and the numbers are the same as the CPU's.
TEST(DeviceStreamCudaTest, BlockingWaitStagesEveryCopyAndMatches) {
  MHA_SKIP_WITHOUT_CUDA();
  DeviceWaitScope waiting(DeviceWait::kBlock);
  const c10::Device gpu(c10::kCUDA, 0);
  const at::Tensor small = SmallQuery();
  {
    DeviceStreamScope scope(gpu);
    const at::Tensor on_gpu = StageToDevice(small, gpu);
    const at::Tensor back = StageToHost(on_gpu * 2);
    scope.Synchronize();
    EXPECT_TRUE(back.is_pinned());
    EXPECT_TRUE(at::equal(back, small * 2));
    const at::Tensor copied = CopyToHost(on_gpu * 3);  // complete on return
    EXPECT_TRUE(copied.is_cpu());
    EXPECT_TRUE(at::equal(copied, small * 3));
  }
  const MhaWeights weights = RandomWeights();
  auto cpu = MakeModel("cpu", weights), gpu_model = MakeModel("cuda:0", weights);
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu_model, nullptr);
  const ForwardInputs in = MakeInputs(SmallQuery());
  ForwardOutputs expected, actual;
  ASSERT_TRUE(cpu->Forward(in, &expected).ok());
  ASSERT_TRUE(gpu_model->Forward(in, &actual).ok());
  EXPECT_TRUE(actual.output.is_pinned());
  EXPECT_TRUE(TensorsNear(actual.output, expected.output, kFp32Tolerance));
  EXPECT_TRUE(TensorsNear(actual.attn_weights, expected.attn_weights, kFp32Tolerance));
}

// Ids and rows copied without a wait: queued behind work already on the stream, right when read.
TEST(DeviceStreamCudaTest, QueuedCopiesReachTheDeviceInStreamOrder) {
  MHA_SKIP_WITHOUT_CUDA();
  const c10::Device gpu(c10::kCUDA, 0);
  DeviceStreamScope scope(gpu);
  const at::Tensor busy = at::randn({2048, 2048}, at::TensorOptions().device(gpu));
  const at::Tensor product = at::mm(busy, busy);  // queued work before the copy
  std::vector<int64_t> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i * 7 % 1000);
  const at::Tensor ids = IdsToDevice(values, gpu);
  EXPECT_EQ(ids.device(), gpu);
  const at::Tensor picked = product.select(1, 0).index_select(0, ids).cpu();
  EXPECT_TRUE(
      at::equal(picked, product.select(1, 0).cpu().index_select(0, at::tensor(values, at::kLong))));
  EXPECT_EQ(IdsToDevice({}, gpu).numel(), 0);
  at::Tensor rows = at::randn({3, kEmbed});  // small: queued through pinned memory all the same
  const at::Tensor expected = rows.clone();
  const at::Tensor on_gpu = CopyToDeviceQueued(rows, gpu);
  rows.zero_();  // the source may change or go once the call returns
  EXPECT_EQ(on_gpu.device(), gpu);
  EXPECT_TRUE(at::equal(on_gpu.cpu(), expected));
}

TEST(DeviceStreamCudaTest, ForwardFromHostMatchesCpuAndReturnsHostTensors) {
  MHA_SKIP_WITHOUT_CUDA();
  const MhaWeights weights = RandomWeights();
  auto cpu = MakeModel("cpu", weights), gpu = MakeModel("cuda:0", weights);
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  for (bool big : {true, false}) {
    for (bool need_weights : {true, false}) {  // explicit softmax path / SDPA on the pool stream
      ForwardInputs in = MakeInputs(big ? BigQuery() : SmallQuery());
      in.need_weights = need_weights;
      ForwardOutputs expected, actual;
      ASSERT_TRUE(cpu->Forward(in, &expected).ok());
      ASSERT_TRUE(gpu->Forward(in, &actual).ok());
      EXPECT_TRUE(actual.output.is_cpu()) << "host query, host output";
      EXPECT_EQ(actual.output.is_pinned(), big);
      EXPECT_TRUE(TensorsNear(actual.output, expected.output, kFp32Tolerance))
          << "big=" << big << " need_weights=" << need_weights;
      EXPECT_EQ(actual.attn_weights.defined(), need_weights);
      if (need_weights) {
        EXPECT_TRUE(actual.attn_weights.is_cpu());
        EXPECT_TRUE(TensorsNear(actual.attn_weights, expected.attn_weights, kFp32Tolerance));
      }
    }
  }
  // A query already on the device keeps the outputs there (queued on the caller's stream: the
  // copy to the host below runs on it, after the pass).
  ForwardInputs on_device = MakeInputs(BigQuery());
  ForwardOutputs expected, actual;
  ASSERT_TRUE(cpu->Forward(on_device, &expected).ok());
  on_device.query = on_device.query.to(c10::Device(c10::kCUDA, 0));
  ASSERT_TRUE(gpu->Forward(on_device, &actual).ok());
  EXPECT_TRUE(actual.output.is_cuda());
  EXPECT_TRUE(TensorsNear(actual.output.cpu(), expected.output, kFp32Tolerance));
}

// Two instances (threads) of one model at once, each on its own stream: every output must equal
// the CPU's. Reading a pinned output before its stream is synchronized, or a pass reading weights
// or inputs another stream has not finished writing, shows up here as wrong numbers.
TEST(DeviceStreamCudaTest, ConcurrentInstancesMatchCpu) {
  MHA_SKIP_WITHOUT_CUDA();
  const MhaWeights weights = RandomWeights();
  auto cpu = MakeModel("cpu", weights), gpu = MakeModel("cuda:0", weights);
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  constexpr int kThreads = 2, kPasses = 16;
  std::vector<ForwardInputs> inputs;
  std::vector<ForwardOutputs> expected(kPasses), actual(kThreads * kPasses);
  for (int i = 0; i < kPasses; ++i) {
    inputs.push_back(MakeInputs(BigQuery()));
    ASSERT_TRUE(cpu->Forward(inputs[i], &expected[i]).ok());
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPasses; ++i) {
        if (!gpu->ForwardValidated(inputs[i], &actual[t * kPasses + i]).ok()) ++failures[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0);
    for (int i = 0; i < kPasses; ++i) {
      const ForwardOutputs& out = actual[t * kPasses + i];
      EXPECT_TRUE(TensorsNear(out.output, expected[i].output, kFp32Tolerance)) << t << "/" << i;
      EXPECT_TRUE(TensorsNear(out.attn_weights, expected[i].attn_weights, kFp32Tolerance));
    }
  }
}

// A library caller with device tensors on a stream of its own: Forward returns with the passes
// queued and that stream ordered after each (through an event), so reading the outputs on it needs
// no synchronization. Were the stream not made to wait, the copies to the host would race the
// passes and read unfinished outputs; were the outputs not recorded on it, a later pass could
// reuse their memory before the copy ran.
TEST(DeviceStreamCudaTest, DeviceQueriesReturnQueuedAndOrderedOnTheCallersStream) {
  MHA_SKIP_WITHOUT_CUDA();
#ifdef MHA_WITH_CUDA
  const MhaWeights weights = RandomWeights();
  auto cpu = MakeModel("cpu", weights), gpu = MakeModel("cuda:0", weights);
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  constexpr int kPasses = 16;
  std::vector<ForwardInputs> inputs(kPasses);
  std::vector<ForwardOutputs> expected(kPasses), actual(kPasses);
  for (int i = 0; i < kPasses; ++i) {
    inputs[i] = MakeInputs(BigQuery());
    ASSERT_TRUE(cpu->Forward(inputs[i], &expected[i]).ok());
  }
  const c10::cuda::CUDAStream mine = c10::cuda::getStreamFromPool(false, 0);
  std::vector<at::Tensor> on_host(kPasses), weights_on_host(kPasses);
  {
    c10::cuda::CUDAStreamGuard guard(mine);
    for (int i = 0; i < kPasses; ++i) {
      ForwardInputs in = inputs[i];
      in.query = in.query.to(c10::Device(c10::kCUDA, 0));  // queued on `mine`
      in.key_padding_mask = in.key_padding_mask.to(c10::Device(c10::kCUDA, 0));
      ASSERT_TRUE(gpu->Forward(in, &actual[i]).ok());
      ASSERT_TRUE(actual[i].output.is_cuda());
      EXPECT_EQ(c10::Stream(c10::cuda::getCurrentCUDAStream(0)), c10::Stream(mine)) << "restored";
      // Copied back on `mine` with nothing synchronized first, then freed: the next pass (on the
      // model's stream) may be handed their memory only once these copies have run.
      on_host[i] = actual[i].output.to(at::kCPU, /*non_blocking=*/true);
      weights_on_host[i] = actual[i].attn_weights.to(at::kCPU, /*non_blocking=*/true);
      actual[i] = ForwardOutputs();
    }
    mine.synchronize();
  }
  for (int i = 0; i < kPasses; ++i) {
    EXPECT_TRUE(TensorsNear(on_host[i], expected[i].output, kFp32Tolerance)) << i;
    EXPECT_TRUE(TensorsNear(weights_on_host[i], expected[i].attn_weights, kFp32Tolerance));
  }
#endif
}

}  // namespace device_stream_test
}  // namespace mha
