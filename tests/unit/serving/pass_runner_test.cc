// PassRunner (server/serving/kinds/multihead/merge/pass_runner.h), the serving layer's merge/split
// over host tensors: a merged pass answers each request as its pass alone would (fixture model,
// within 1e-5), answers come in each task's output types, and a failed pass of session steps leaves
// every cache at its length.
#include "server/serving/kinds/multihead/merge/pass_runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "batch_test_util.h"
#include "mha/kv_cache.h"
#include "mha/model.h"
#include "mha/tensor_adapter.h"
#include "server/serving/kinds/multihead/session_step.h"

namespace mha::serve {
namespace {

using testing::MakeGenerator;
using testing::MakeRequest;
using testing::MaskKind;
using testing::ToForwardOutputs;
using testing::ToHostInputs;

InferenceTask TaskOf(const ForwardInputs& in) {
  InferenceTask task;
  task.inputs = ToHostInputs(in);
  return task;
}

TEST(PassRunner, AMergedPassAnswersEachRequestAsItsPassAlone) {
  auto model = testing::LoadFixtureModel("bias_kv_zero_attn_kpm");
  ASSERT_NE(model, nullptr);
  auto runner = MakeModelPassRunner(model);
  auto gen = MakeGenerator(3);
  std::vector<ForwardInputs> requests = {
      MakeRequest(model->options(), {1, 3, 0, MaskKind::kBool}, gen),
      MakeRequest(model->options(), {2, 5, 0, MaskKind::kFloat}, gen)};
  std::vector<InferenceTask> tasks;
  for (const ForwardInputs& in : requests) tasks.push_back(TaskOf(in));
  std::vector<HostOutputs> outs;
  PassTimes times;
  ASSERT_TRUE(runner->RunMerged({&tasks[0], &tasks[1]}, &outs, RealClock(), &times).ok());
  ASSERT_EQ(outs.size(), 2u);
  for (size_t i = 0; i < requests.size(); ++i) {
    ForwardOutputs alone;
    ASSERT_TRUE(model->Forward(requests[i], &alone).ok());
    EXPECT_TRUE(testing::TensorsNear(ToTensor(outs[i].output), alone.output, 1e-5)) << i;
    HostOutputs one;
    ASSERT_TRUE(runner->RunOne(tasks[i], &one).ok());
    EXPECT_TRUE(testing::TensorsNear(ToTensor(one.output), alone.output, 1e-5)) << i;
  }
}

TEST(PassRunner, AnswersComeInTheTasksOutputTypes) {
  auto model = testing::SmallModel();
  ASSERT_NE(model, nullptr);
  auto runner = MakeModelPassRunner(model);
  auto gen = MakeGenerator(4);
  ForwardInputs in = MakeRequest(model->options(), {1, 4}, gen);
  in.need_weights = true;
  InferenceTask task = TaskOf(in);
  task.output_types = OutputTypes{ElementType::kBFloat16, ElementType::kFloat16};
  HostOutputs out;
  ASSERT_TRUE(runner->RunOne(task, &out).ok());
  EXPECT_EQ(out.output.dtype(), ElementType::kBFloat16);
  EXPECT_EQ(out.attn_weights.dtype(), ElementType::kFloat16);
  ForwardOutputs alone;
  ASSERT_TRUE(model->Forward(in, &alone).ok());
  EXPECT_TRUE(at::equal(ToTensor(out.output), alone.output.to(at::kBFloat16)))
      << "cast once, from the pass's own float32";
}

TEST(PassRunner, AFailedPassOfStepsLeavesEveryCacheAtItsLength) {
  auto c = testing::LoadFixtureCase("decode_causal");
  ASSERT_TRUE(c.ok());
  std::shared_ptr<const MhaModel> model = testing::LoadCaseModel(*c);
  ASSERT_NE(model, nullptr);
  auto pool = KvBlockPool::Create(KvPoolOptions{1 << 20, 4}, *model);
  ASSERT_TRUE(pool.ok());
  KvCache first(*pool, 2), second(*pool, 2);
  std::vector<InferenceTask> tasks;
  for (KvCache* cache : {&first, &second}) {
    ASSERT_TRUE(cache->Reserve(2).ok());
    InferenceTask task = TaskOf(c->inputs);
    task.inputs.query = ToHost(c->inputs.query.narrow(1, 0, 2).contiguous());
    task.step = std::make_shared<SessionStep>(SessionStep{model, nullptr, cache, false});
    tasks.push_back(std::move(task));
  }
  // The second step's query has the wrong width: the pass fails after the first one's appends.
  tasks[1].inputs.query = ToHost(at::randn({2, 2, c->inputs.query.size(2) + 1}));
  auto runner = MakeModelPassRunner(model);
  std::vector<HostOutputs> outs;
  EXPECT_FALSE(runner->RunSteps({&tasks[0], &tasks[1]}, &outs).ok());
  EXPECT_EQ(first.length(), 0);
  EXPECT_EQ(second.length(), 0);
  ASSERT_TRUE(runner->RunOne(tasks[0], &outs.emplace_back()).ok());  // alone, it runs
  EXPECT_EQ(first.length(), 2);
  EXPECT_TRUE(
      testing::TensorsNear(ToTensor(outs.back().output), c->expected_output.narrow(1, 0, 2), 1e-5));
}

}  // namespace
}  // namespace mha::serve
