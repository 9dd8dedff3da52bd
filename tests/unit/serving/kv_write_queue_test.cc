// KvWriteQueue (sessions/kv_write_queue.h): jobs run in order on its writer thread, a full queue
// refuses a push (counted) instead of growing, Flush waits for what was pushed before it, the
// depth, bytes and lag show a job that waits, and Stop cancels what never ran.
#include "server/serving/sessions/kv_write_queue.h"

#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "wait.h"

namespace mha::serve {
namespace kv_write_queue_test {

using testing::GetWithin;

// A job that blocks the writer until released.
struct Gate {
  std::promise<void> entered, open;
  std::shared_future<void> opened = open.get_future().share();
  KvWriteJob Job() {
    KvWriteJob job;
    job.session = "gate";
    job.run = [this] {
      entered.set_value();
      opened.wait();
      return Status::Ok();
    };
    return job;
  }
};

TEST(KvWriteQueue, JobsRunInOrderAndFlushWaitsForThem) {
  KvWriteQueue queue(16);
  std::mutex mu;
  std::vector<int> ran;
  for (int i = 0; i < 8; ++i) {
    KvWriteJob job;
    job.run = [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      ran.push_back(i);
      return i == 3 ? Unavailable("down") : Status::Ok();
    };
    job.done = [&, i](const Status& s) { EXPECT_EQ(s.ok(), i != 3); };
    ASSERT_TRUE(queue.Push(std::move(job)));
  }
  ASSERT_TRUE(queue.Flush(std::chrono::steady_clock::now() + testing::kWaitTimeout));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(queue.ran(), 8);
  EXPECT_EQ(queue.depth(), 0u);
}

TEST(KvWriteQueue, AFullQueueRefusesAndShowsItsDepthBytesAndLag) {
  KvWriteQueue queue(2);
  Gate gate;
  ASSERT_TRUE(queue.Push(gate.Job()));
  GetWithin(gate.entered.get_future(), "the writer to take the gate");
  for (int i = 0; i < 2; ++i) {
    KvWriteJob job;
    job.bytes = 100;
    ASSERT_TRUE(queue.Push(std::move(job)));
  }
  KvWriteJob refused;
  bool done_called = false;
  refused.done = [&](const Status&) { done_called = true; };
  EXPECT_FALSE(queue.Push(std::move(refused)));
  EXPECT_FALSE(done_called) << "a refused job is the caller's to count";
  EXPECT_EQ(queue.refused(), 1);
  EXPECT_EQ(queue.depth(), 2u);
  EXPECT_EQ(queue.bytes_queued(), 200);
  EXPECT_TRUE(testing::WaitUntil([&] { return queue.lag_seconds() > 0; }, "a lag"));
  EXPECT_FALSE(queue.Flush(std::chrono::steady_clock::now())) << "the gate still holds it";
  gate.open.set_value();
  ASSERT_TRUE(queue.Flush(std::chrono::steady_clock::now() + testing::kWaitTimeout));
  EXPECT_EQ(queue.lag_seconds(), 0);
  EXPECT_EQ(queue.bytes_queued(), 0);
}

TEST(KvWriteQueue, StopCancelsWhatNeverRan) {
  Gate gate;
  Status cancelled;
  {
    KvWriteQueue queue(1 << 20);
    ASSERT_TRUE(queue.Push(gate.Job()));
    GetWithin(gate.entered.get_future(), "the writer to take the gate");
    KvWriteJob waiting;
    waiting.run = [] { return Internal("must not run"); };
    waiting.done = [&](const Status& s) { cancelled = s; };
    ASSERT_TRUE(queue.Push(std::move(waiting)));
    std::thread stopper([&] { queue.Stop(); });
    // Once a push is refused, Stop has taken the waiting jobs: the writer may finish the gate.
    ASSERT_TRUE(testing::WaitUntil([&] { return !queue.Push(KvWriteJob()); }, "Stop to begin"));
    gate.open.set_value();
    stopper.join();
  }
  EXPECT_EQ(cancelled.code(), StatusCode::kCancelled) << cancelled.ToString();
}

}  // namespace kv_write_queue_test
}  // namespace mha::serve
