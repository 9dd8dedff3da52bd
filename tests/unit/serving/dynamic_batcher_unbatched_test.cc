// DynamicBatcher with batching off (one request per pass, a real small model; no gRPC): drops
// expired and cancelled tasks before compute, refuses at once when the queue is full or after
// Shutdown, calls `done` exactly once per task, and delivers big outputs on the completion thread.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "batch_test_util.h"
#include "mha/tensor_adapter.h"
#include "server/serving/kinds/multihead/dynamic_batcher.h"

namespace mha::serve {
namespace dynamic_batcher_unbatched_test {

using testing::SmallModel;

// Batching off: one request per pass on `workers` instances, `queue` tasks waiting at most.
BatcherOptions Unbatched(int workers, size_t queue) {
  BatcherOptions o;
  o.batching = false;
  o.instances = workers;
  o.max_queue_size = queue;
  return o;
}

std::unique_ptr<DynamicBatcher> Scheduler(const std::shared_ptr<const MhaModel>& model,
                                          BatcherOptions o) {
  return DynamicBatcher::ForModel(model, "small", o);
}

InferenceTask Task(const std::shared_ptr<const MhaModel>& model, int64_t t = 3) {
  InferenceTask task;
  task.model_name = "small";
  task.inputs.query = ToHost(at::randn({2, t, 16}));
  return task;
}

// Collects results; Wait(n) blocks until n arrived.
struct Results {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<InferenceResult> results;
  DoneCallback Callback() {
    return [this](InferenceResult r) {
      std::lock_guard<std::mutex> lock(mu);
      results.push_back(std::move(r));
      cv.notify_all();
    };
  }
  void Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return results.size() >= n; }));
  }
};

TEST(DynamicBatcherUnbatchedTest, RunsTheForwardPassAndReportsTimings) {
  auto model = SmallModel();
  auto scheduler = Scheduler(model, Unbatched(1, 4));
  DynamicBatcher& runner = *scheduler;
  Results results;
  InferenceTask task = Task(model);
  const at::Tensor query = ToTensor(task.inputs.query);
  const Clock::time_point submitted = task.submitted;
  runner.Submit(std::move(task), results.Callback());
  results.Wait(1);
  const int64_t elapsed_us = MicrosBetween(submitted, Clock::now());
  const InferenceResult& r = results.results[0];
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ForwardInputs in;
  in.query = query;
  ForwardOutputs expected;
  ASSERT_TRUE(model->Forward(in, &expected).ok());
  EXPECT_TRUE(at::equal(ToTensor(r.outputs.output), expected.output));
  // The timings are parts of the task's life (they were >= 0 checks, which could not fail: both
  // are clamped at 0): queue and compute fit inside the time from enqueue to the answer.
  EXPECT_LE(r.queue_us + r.compute_us, elapsed_us);
}

TEST(DynamicBatcherUnbatchedTest, ExpiredAndCancelledTasksAreDroppedBeforeCompute) {
  auto model = SmallModel();
  auto scheduler = Scheduler(model, Unbatched(1, 4));
  DynamicBatcher& runner = *scheduler;
  Results results;
  InferenceTask expired = Task(model);
  expired.deadline = Clock::now() - std::chrono::milliseconds(1);
  runner.Submit(std::move(expired), results.Callback());
  results.Wait(1);
  EXPECT_EQ(results.results[0].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(results.results[0].status.message().find("before the forward pass"), std::string::npos);
  EXPECT_FALSE(results.results[0].outputs.output.defined());

  InferenceTask cancelled = Task(model);
  cancelled.is_cancelled = [] { return true; };
  runner.Submit(std::move(cancelled), results.Callback());
  results.Wait(2);
  EXPECT_EQ(results.results[1].status.code(), StatusCode::kCancelled);
  EXPECT_EQ(results.results[1].compute_us, 0);
}

TEST(DynamicBatcherUnbatchedTest, ModelErrorsComeBackAsStatus) {
  auto model = SmallModel();
  auto scheduler = Scheduler(model, Unbatched(1, 4));
  DynamicBatcher& runner = *scheduler;
  Results results;
  InferenceTask bad = Task(model);
  // Runners trust their tasks (ServerCore validated them); if a pass still fails, LibTorch's
  // error comes back as INTERNAL instead of escaping as an exception.
  bad.inputs.query = ToHost(at::randn({2, 3, 8}));  // wrong E
  runner.Submit(std::move(bad), results.Callback());
  results.Wait(1);
  EXPECT_EQ(results.results[0].status.code(), StatusCode::kInternal);
  EXPECT_NE(results.results[0].status.message().find("forward pass failed"), std::string::npos);
}

TEST(DynamicBatcherUnbatchedTest, FullQueueIsRefusedInlineAndEveryTaskIsAnsweredOnce) {
  auto model = SmallModel();
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = false, started = false;
  // The first pass blocks the only worker until the gate opens (a held model: no timing).
  auto forward = [&](const ForwardInputs& in, ForwardOutputs* out) {
    {
      std::unique_lock<std::mutex> lock(gate_mu);
      if (!started) {
        started = true;
        gate_cv.notify_all();
        gate_cv.wait(lock, [&] { return open; });
      }
    }
    return model->ForwardValidated(in, out);
  };
  DynamicBatcher runner("small", MakeBatchModelInfo(DescribeModel(*model)), forward,
                        Unbatched(1, 2));
  Results results;
  runner.Submit(Task(model), results.Callback());  // the blocker
  bool blocked = false;
  {
    std::unique_lock<std::mutex> lock(gate_mu);
    blocked = gate_cv.wait_for(lock, std::chrono::seconds(60), [&] { return started; });
    open = open || !blocked;  // a failing test leaves no pass held
  }
  ASSERT_TRUE(blocked) << "the first pass never began";
  runner.Submit(Task(model), results.Callback());  // queued (1/2)
  runner.Submit(Task(model), results.Callback());  // queued (2/2)
  runner.Submit(Task(model), results.Callback());  // refused, inline
  {
    std::lock_guard<std::mutex> lock(results.mu);
    ASSERT_EQ(results.results.size(), 1u);
    EXPECT_EQ(results.results[0].status.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(results.results[0].status.message().find("--max-queue-size 2"), std::string::npos);
  }
  {
    std::lock_guard<std::mutex> lock(gate_mu);
    open = true;
  }
  gate_cv.notify_all();
  results.Wait(4);
  runner.Shutdown();
  EXPECT_EQ(results.results.size(), 4u);
  int ok = 0;
  for (const auto& r : results.results) ok += r.status.ok();
  EXPECT_EQ(ok, 3);
}

TEST(DynamicBatcherUnbatchedTest, ShutdownDrainsAcceptedTasksThenRefuses) {
  auto model = SmallModel();
  Results results;
  auto runner = Scheduler(model, Unbatched(2, 64));
  constexpr int kTasks = 40;
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&] {
      for (int i = 0; i < kTasks / 4; ++i) runner->Submit(Task(model, 64), results.Callback());
    });
  }
  for (auto& th : submitters) th.join();
  runner->Shutdown();  // returns once every accepted task was answered
  EXPECT_EQ(results.results.size(), static_cast<size_t>(kTasks));
  for (const auto& r : results.results) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  runner->Submit(Task(model), results.Callback());
  ASSERT_EQ(results.results.size(), static_cast<size_t>(kTasks + 1));
  EXPECT_EQ(results.results.back().status.code(), StatusCode::kUnavailable);
}

TEST(DynamicBatcherUnbatchedTest, BigOutputsCompleteOnTheCompletionThread) {
  auto model = SmallModel();
  BatcherOptions options = Unbatched(1, 8);
  options.inline_completion_max_bytes = 0;  // every completion is handed off
  std::mutex mu;
  std::condition_variable cv;
  std::thread::id worker_thread, completion_thread;
  bool done = false;
  auto forward = [&](const ForwardInputs& in, ForwardOutputs* out) {
    worker_thread = std::this_thread::get_id();
    return model->ForwardValidated(in, out);
  };
  DynamicBatcher runner("small", MakeBatchModelInfo(DescribeModel(*model)), forward, options);
  runner.Submit(Task(model), [&](InferenceResult r) {
    EXPECT_TRUE(r.status.ok());
    std::lock_guard<std::mutex> lock(mu);
    completion_thread = std::this_thread::get_id();
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
  EXPECT_NE(worker_thread, completion_thread);
}

}  // namespace dynamic_batcher_unbatched_test
}  // namespace mha::serve
