// DynamicBatcher scheduling with a fake forward function: merging, max rows/tokens, bucketing,
// oldest group first, deadlines, cancellation, full queue, shutdown, failure isolation. (Batching
// off: dynamic_batcher_unbatched_test.cc; with a real model: batch_assembly_test.cc.)
#include "server/serving/kinds/multihead/dynamic_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "batch_test_util.h"
#include "dynamic_batcher_test_util.h"

namespace mha::serve {
namespace dynamic_batcher_test {

using namespace std::chrono_literals;
using namespace batcher_testing;

TEST(DynamicBatcherTest, SingleRequestRunsAlone) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(8, 0));
  Results results;
  batcher->Submit(Task(1, 5), results.For(1));
  ASSERT_TRUE(results.WaitFor(1));
  ExpectAnswerFor(results, 1, 5);
  ASSERT_EQ(fake.calls().size(), 1u);
}

TEST(DynamicBatcherTest, MergesConcurrentRequestsAndRoutesAnswers) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(64, 200000));
  Results results;
  for (int id = 1; id <= 4; ++id) batcher->Submit(Task(id, 3 + id, id), results.For(id));
  ASSERT_TRUE(results.WaitFor(4));
  ASSERT_EQ(fake.calls().size(), 1u);
  EXPECT_EQ(fake.calls()[0].rows, 1 + 2 + 3 + 4);
  EXPECT_EQ(fake.calls()[0].t, 7);  // padded to the longest
  for (int id = 1; id <= 4; ++id) {
    ExpectAnswerFor(results, id, 3 + id, id);
    EXPECT_GT(results.Get(id).compute_us, 0);
  }
}

TEST(DynamicBatcherTest, WaitsAtMostTheQueueDelay) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(64, 30000));
  Results results;
  const auto start = Clock::now();
  batcher->Submit(Task(1, 5), results.For(1));
  ASSERT_TRUE(results.WaitFor(1));
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 29ms);
  EXPECT_LT(waited, 2s);
  EXPECT_GE(results.Get(1).queue_us, 29000);
}

// BatcherOptions::clock: the queue delay counts on the batcher's clock. A FakeClock's waiter
// looks again every FakeClock::kTick, so advancing the clock dispatches the waiting batch.
TEST(DynamicBatcherTest, TheQueueDelayCountsOnTheBatchersClock) {
  FakeModel fake;
  FakeClock clock;
  BatcherOptions o = Options(64, 10000000);  // 10 s for company: never on the real clock here
  o.clock = &clock;
  auto batcher = MakeBatcher(fake, o);
  Results results;
  for (int id = 1; id <= 2; ++id) {
    batcher->Submit(Task(id, 4), results.For(id));
  }
  EXPECT_FALSE(results.WaitFor(1, 20ms)) << "dispatched before the delay on its clock";
  clock.Advance(10s);
  ASSERT_TRUE(results.WaitFor(2, 5s));
  ASSERT_EQ(fake.calls().size(), 1u);
  EXPECT_EQ(fake.calls()[0].rows, 2);
  EXPECT_EQ(results.Get(1).queue_us, 10000000);  // read on the fake clock too
}

// BatcherOptions::pass_hook runs every pass: merged, and each alone when the merged one failed.
TEST(DynamicBatcherTest, ThePassHookWrapsEveryPass) {
  FakeModel fake;
  BatcherOptions o = Options(64, 100000);
  std::atomic<int> hooked{0};
  o.pass_hook = [&hooked](const std::function<Status()>& pass) {
    ++hooked;
    return pass();
  };
  auto batcher = MakeBatcher(fake, o);
  Results results;
  batcher->Submit(Task(1, 4), results.For(1));
  batcher->Submit(PoisonedTask(2, 4), results.For(2));
  ASSERT_TRUE(results.WaitFor(2));
  ExpectAnswerFor(results, 1, 4);
  EXPECT_EQ(fake.calls().size(), 3u);  // the merged pass, then each alone
  EXPECT_EQ(hooked.load(), 3);
}

TEST(DynamicBatcherTest, FullBatchGoesWithoutWaiting) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(3, 10000000));  // 10 s delay: only "full" dispatches
  Results results;
  for (int id = 1; id <= 6; ++id) batcher->Submit(Task(id, 4), results.For(id));
  ASSERT_TRUE(results.WaitFor(6, 5s));
  for (const auto& call : fake.calls()) EXPECT_EQ(call.rows, 3);
}

TEST(DynamicBatcherTest, RespectsMaxRowsAndTokens) {
  FakeModel fake;
  BatcherOptions o = Options(5, 50000);
  o.max_batch_tokens = 40;  // two tasks of T=16 (32 tokens), not three
  auto batcher = MakeBatcher(fake, o);
  Results results;
  fake.Hold();
  batcher->Submit(Task(100, 16), results.For(100));  // occupies the worker
  ASSERT_TRUE(fake.WaitForCalls(1)) << "the first pass never began";
  for (int id = 1; id <= 5; ++id) batcher->Submit(Task(id, 16), results.For(id));
  batcher->Submit(Task(6, 3, 4), results.For(6));  // 4 rows x T=3: fits alone (12 tokens)
  fake.Release();
  ASSERT_TRUE(results.WaitFor(7));
  for (const auto& call : fake.calls()) {
    EXPECT_LE(call.rows, 5);
    EXPECT_LE(call.rows * call.t, 40) << "rows " << call.rows << " t " << call.t;
  }
  for (int id = 1; id <= 5; ++id) ExpectAnswerFor(results, id, 16);
  ExpectAnswerFor(results, 6, 3, 4);
}

TEST(DynamicBatcherTest, BucketsByLengthAndServesTheOldestGroupFirst) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(64, 0));
  Results results;
  fake.Hold();
  batcher->Submit(Task(100, 2), results.For(100));
  ASSERT_TRUE(fake.WaitForCalls(1)) << "the first pass never began";
  batcher->Submit(Task(1, 40), results.For(1));  // oldest: bucket 40
  for (int id = 2; id <= 6; ++id) batcher->Submit(Task(id, 8 + id), results.For(id));  // 16
  batcher->Submit(Task(7, 35), results.For(7));  // bucket 40 again
  fake.Release();
  ASSERT_TRUE(results.WaitFor(8));
  const auto calls = fake.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].rows, 2);  // tasks 1 and 7: the oldest task's group, T padded to 40
  EXPECT_EQ(calls[1].t, 40);
  EXPECT_EQ(calls[2].rows, 5);  // tasks 2..6, T up to 14
  EXPECT_EQ(calls[2].t, 14);
  for (int id = 1; id <= 7; ++id)
    ExpectAnswerFor(results, id, id == 1 ? 40 : id == 7 ? 35 : 8 + id);
}

TEST(DynamicBatcherTest, DropsExpiredAndCancelledTasksBeforeCompute) {
  FakeModel fake;
  FakeClock clock;  // the queue's time moves only when the test says so
  BatcherOptions o = Options(64, 0);
  o.clock = &clock;
  auto batcher = MakeBatcher(fake, o);
  Results results;
  fake.Hold();
  batcher->Submit(Task(100, 2), results.For(100));
  ASSERT_TRUE(fake.WaitForCalls(1)) << "the first pass never began";
  InferenceTask expiring = Task(1, 4);
  expiring.deadline = clock.Now() + 20ms;
  batcher->Submit(std::move(expiring), results.For(1));
  std::atomic<bool> cancelled{false};
  InferenceTask cancellable = Task(2, 4);
  cancellable.is_cancelled = [&cancelled] { return cancelled.load(); };
  batcher->Submit(std::move(cancellable), results.For(2));
  batcher->Submit(Task(3, 4), results.For(3));
  clock.Advance(40ms);  // task 1's deadline passes while it waits behind the held pass
  cancelled = true;
  fake.Release();
  ASSERT_TRUE(results.WaitFor(4));
  EXPECT_EQ(results.Get(1).status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(results.Get(1).queue_us, 20000);
  EXPECT_EQ(results.Get(2).status.code(), StatusCode::kCancelled);
  ExpectAnswerFor(results, 3, 4);
  for (const auto& call : fake.calls()) EXPECT_NE(call.max_id, 1.0f);
  ASSERT_EQ(fake.calls().size(), 2u);
  EXPECT_EQ(fake.calls()[1].rows, 1);  // only task 3 computed
}

TEST(DynamicBatcherTest, FullQueueAnswersResourceExhaustedInline) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(64, 0, /*queue=*/2));
  Results results;
  fake.Hold();
  batcher->Submit(Task(100, 2), results.For(100));
  ASSERT_TRUE(fake.WaitForCalls(1)) << "the first pass never began";
  batcher->Submit(Task(1, 4), results.For(1));
  batcher->Submit(Task(2, 4), results.For(2));
  EXPECT_EQ(batcher->queue_depth(), 2u);
  batcher->Submit(Task(3, 4), results.For(3));
  ASSERT_TRUE(results.Has(3)) << "refusal must be answered inside Submit";
  EXPECT_EQ(results.Get(3).status.code(), StatusCode::kResourceExhausted);
  fake.Release();
  ASSERT_TRUE(results.WaitFor(4));
  ExpectAnswerFor(results, 1, 4);
  ExpectAnswerFor(results, 2, 4);
}

TEST(DynamicBatcherTest, ShutdownCompletesAcceptedTasksAndRefusesNewOnes) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(64, 10000000));  // would wait 10 s for company
  Results results;
  for (int id = 1; id <= 5; ++id) batcher->Submit(Task(id, id), results.For(id));
  const auto start = Clock::now();
  batcher->Shutdown();
  EXPECT_LT(Clock::now() - start, 5s);
  ASSERT_TRUE(results.WaitFor(5, 0ms));
  for (int id = 1; id <= 5; ++id) ExpectAnswerFor(results, id, id);
  batcher->Submit(Task(6, 3), results.For(6));
  ASSERT_TRUE(results.Has(6));
  EXPECT_EQ(results.Get(6).status.code(), StatusCode::kUnavailable);
  batcher->Shutdown();  // idempotent
}

TEST(DynamicBatcherTest, FailedBatchIsRetriedOneByOne) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(64, 100000));
  Results results;
  batcher->Submit(Task(1, 4), results.For(1));
  batcher->Submit(PoisonedTask(2, 6), results.For(2));
  batcher->Submit(Task(3, 5), results.For(3));
  ASSERT_TRUE(results.WaitFor(3));
  ExpectAnswerFor(results, 1, 4);
  ExpectAnswerFor(results, 3, 5);
  EXPECT_EQ(results.Get(2).status.code(), StatusCode::kInternal);
  EXPECT_EQ(fake.calls().size(), 4u);  // the merged pass, then each alone
  for (int id = 1; id <= 3; ++id) EXPECT_EQ(results.Callbacks(id), 1);
}

TEST(DynamicBatcherTest, ExactlyOneCallbackPerTaskUnderLoad) {
  FakeModel fake;
  BatcherOptions o = Options(8, 500, /*queue=*/16);
  o.instances = 2;
  auto batcher = MakeBatcher(fake, o);
  Results results;
  constexpr int kThreads = 4, kPerThread = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kPerThread; ++i) {
        const int id = t * kPerThread + i + 1;
        InferenceTask task = Task(id, 1 + rng() % 40, 1 + rng() % 3);
        if (rng() % 5 == 0) task.deadline = Clock::now() + std::chrono::microseconds(rng() % 2000);
        if (rng() % 7 == 0) task.is_cancelled = [] { return true; };
        batcher->Submit(std::move(task), results.For(id));
        if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      }
    });
  }
  for (auto& th : threads) th.join();
  batcher->Shutdown();
  ASSERT_TRUE(results.WaitFor(kThreads * kPerThread, 0ms));
  for (int id = 1; id <= kThreads * kPerThread; ++id) {
    ASSERT_EQ(results.Callbacks(id), 1) << "task " << id;
    const StatusCode code = results.Get(id).status.code();
    EXPECT_TRUE(code == StatusCode::kOk || code == StatusCode::kDeadlineExceeded ||
                code == StatusCode::kCancelled || code == StatusCode::kResourceExhausted)
        << results.Get(id).status.ToString();
  }
}

TEST(DynamicBatcherTest, ShortDeadlineDoesNotWaitForCompany) {
  FakeModel fake;
  auto batcher = MakeBatcher(fake, Options(64, 10000000));  // would wait 10 s for company
  Results results;
  InferenceTask task = Task(1, 4);
  task.deadline = Clock::now() + 2s;  // sooner than the delay: dispatched at once, not dropped
  batcher->Submit(std::move(task), results.For(1));
  ASSERT_TRUE(results.WaitFor(1, 1s));
  ExpectAnswerFor(results, 1, 4);
}

// No work for answers nobody will read. With a fake pass-time estimate (an hour
// for a pass of more than 4 tokens, nothing up to 4), a task whose pass alone would outlast its
// deadline is DEADLINE_EXCEEDED before compute, and a task joins a merged pass only while the
// pass fits every deadline in it. Nothing depends on speed: deadlines are minutes away, the
// estimate is hours.
TEST(DynamicBatcherTest, MergesOnlyWhatTheEstimatedPassTimeAllows) {
  FakeModel fake;
  BatcherOptions o = Options(64, 0);
  o.estimate_pass_us = [](bool /*session*/, int64_t tokens) { return tokens > 4 ? 3600e6 : 0.0; };
  auto batcher = MakeBatcher(fake, o);
  Results results;
  fake.Hold();
  batcher->Submit(Task(100, 2), results.For(100));  // occupies the worker
  ASSERT_TRUE(fake.WaitForCalls(1)) << "the first pass never began";
  const Clock::time_point soon = Clock::now() + 10min, late = Clock::now() + 48h;
  InferenceTask a = Task(1, 4);
  a.deadline = late;  // alone: 4 tokens, no estimate
  InferenceTask b = Task(2, 4);
  b.deadline = soon;  // with a: 8 tokens = an hour > 10 min: waits for a pass of its own
  InferenceTask c = Task(3, 8);
  c.deadline = soon;             // alone: 8 tokens = an hour > 10 min: dropped before compute
  InferenceTask d = Task(4, 4);  // no deadline: joins a (an hour < 48 h)
  batcher->Submit(std::move(a), results.For(1));
  batcher->Submit(std::move(b), results.For(2));
  batcher->Submit(std::move(c), results.For(3));
  batcher->Submit(std::move(d), results.For(4));
  fake.Release();
  ASSERT_TRUE(results.WaitFor(5));
  ExpectAnswerFor(results, 1, 4);
  ExpectAnswerFor(results, 2, 4);
  ExpectAnswerFor(results, 4, 4);
  const InferenceResult dropped = results.Get(3);
  EXPECT_EQ(dropped.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(dropped.status.message().find("before the forward pass"), std::string::npos)
      << dropped.status.message();
  EXPECT_FALSE(dropped.outputs.output.defined());
  const auto calls = fake.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].rows, 2);  // a + d
  EXPECT_EQ(calls[1].max_id, 4.0f);
  EXPECT_EQ(calls[2].rows, 1);  // b alone
  EXPECT_EQ(calls[2].max_id, 2.0f);
  for (const auto& call : calls) EXPECT_NE(call.max_id, 3.0f);
  for (int id : {1, 2, 3, 4, 100}) EXPECT_EQ(results.Callbacks(id), 1) << id;
}

}  // namespace dynamic_batcher_test
}  // namespace mha::serve
