// BatchingRunner (one DynamicBatcher per model) and the per-model batching keys of config.json.
#include "batching_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>

#include "batch_test_util.h"

namespace mha::serve {
namespace {

using testing::MakeGenerator;
using testing::MakeRequest;
using testing::TempDir;

BatcherOptions Defaults() {
  BatcherOptions o;
  o.max_batch_rows = 7;
  o.max_batch_tokens = 700;
  o.max_queue_delay_us = 70;
  o.max_queue_size = 17;
  o.instances = 1;
  return o;
}

std::string WriteConfig(const TempDir& dir, const std::string& json) {
  const std::string path = dir.path() + "/config.json";
  std::ofstream(path) << json;
  return path;
}

TEST(ReadBatcherConfigTest, MissingFileOrKeysKeepTheFlags) {
  auto none = ReadBatcherConfig("", Defaults());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->max_batch_rows, 7);
  auto missing = ReadBatcherConfig("/nonexistent/config.json", Defaults());
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->max_queue_size, 17u);
  TempDir dir;
  auto other_keys = ReadBatcherConfig(WriteConfig(dir, R"({"num_heads": 4})"), Defaults());
  ASSERT_TRUE(other_keys.ok());
  EXPECT_EQ(other_keys->max_batch_tokens, 700);
  EXPECT_EQ(other_keys->instances, 1);
}

TEST(ReadBatcherConfigTest, KeysOverrideTheFlags) {
  TempDir dir;
  auto o = ReadBatcherConfig(WriteConfig(dir, R"({"num_heads": 4, "max_batch_size": 32,
      "max_batch_tokens": 4096, "max_queue_delay_us": 0, "max_queue_size": 5, "instances": 3})"),
                             Defaults());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->max_batch_rows, 32);
  EXPECT_EQ(o->max_batch_tokens, 4096);
  EXPECT_EQ(o->max_queue_delay_us, 0);
  EXPECT_EQ(o->max_queue_size, 5u);
  EXPECT_EQ(o->instances, 3);
}

TEST(ReadBatcherConfigTest, BadValuesNameTheFileAndKey) {
  TempDir dir;
  for (const char* json : {R"({"max_batch_size": 0})", R"({"max_batch_tokens": "big"})",
                           R"({"max_queue_delay_us": -1})", R"({"instances": 1.5})",
                           R"({"instances": 1000})", R"([1, 2])"}) {
    const std::string path = WriteConfig(dir, json);
    auto o = ReadBatcherConfig(path, Defaults());
    ASSERT_FALSE(o.ok()) << json;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(o.status().message().find(path), std::string::npos) << o.status().message();
  }
}

TEST(BatchingRunnerTest, RoutesEachModelToItsOwnBatcher) {
  auto self = testing::LoadFixtureModel("self_basic");
  auto cross = testing::LoadFixtureModel("kdim_vdim");
  ASSERT_NE(self, nullptr);
  ASSERT_NE(cross, nullptr);
  BatchingRunner runner(Defaults(), nullptr);
  runner.AddModel("self", self, Defaults());
  auto gen = MakeGenerator(9);
  std::vector<ForwardInputs> requests;
  std::vector<std::shared_ptr<const MhaModel>> models;
  for (int i = 0; i < 8; ++i) {
    models.push_back(i % 2 ? cross : self);  // "cross" is never added: made on first use
    requests.push_back(MakeRequest(models.back()->options(), {1, 3 + i, i % 2 ? 5 : 0}, gen));
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<InferenceResult> results(requests.size());
  int answered = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    InferenceTask task;
    task.model = models[i];
    task.model_name = i % 2 ? "cross" : "self";
    task.inputs = requests[i];
    runner.Submit(std::move(task), [&, i](InferenceResult r) {
      std::lock_guard<std::mutex> lock(mu);
      results[i] = std::move(r);
      ++answered;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30),
                            [&] { return answered == static_cast<int>(requests.size()); }));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.ToString();
    ForwardOutputs alone;
    ASSERT_TRUE(models[i]->Forward(requests[i], &alone).ok());
    EXPECT_TRUE(testing::TensorsNear(results[i].outputs.output, alone.output, 1e-5)) << i;
  }
  EXPECT_EQ(runner.queue_depth(), 0u);
  runner.Shutdown();
  std::atomic<int> refused{0};
  InferenceTask late;
  late.model = self;
  late.inputs = requests[0];
  runner.Submit(std::move(late),
                [&](InferenceResult r) { refused += r.status.code() == StatusCode::kUnavailable; });
  EXPECT_EQ(refused.load(), 1) << "after Shutdown: UNAVAILABLE, inline";
  InferenceTask no_model;
  runner.Submit(std::move(no_model), [&](InferenceResult r) { refused += !r.status.ok(); });
  EXPECT_EQ(refused.load(), 2);
}

}  // namespace
}  // namespace mha::serve
