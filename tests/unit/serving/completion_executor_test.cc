// CompletionExecutor (completion_executor.h): an answer whose output is at most inline_max_bytes
// is delivered on the caller's thread, a bigger one on a completion thread; without threads
// everything is inline; Shutdown still runs what is queued, and later completions run inline; a
// callback that throws is contained; every callback runs exactly once.
#include "server/serving/scheduling/completion_executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "wait.h"

namespace mha::serve {
namespace completion_executor_test {

using namespace std::chrono_literals;

// A result whose output has `floats` float32 values (4 bytes each); 0: no output (a failure).
InferenceResult Result(int64_t floats) {
  InferenceResult r;
  if (floats > 0)
    r.outputs.output =
        HostTensor::FromFloats({floats}, std::vector<float>(static_cast<size_t>(floats)));
  return r;
}

// Runs one completion and says on which thread its callback ran (waiting at most 60 s).
std::thread::id CompletedOn(CompletionExecutor& executor, int64_t floats) {
  auto ran = std::make_shared<std::promise<std::thread::id>>();
  auto on = ran->get_future();
  executor.Complete([ran](InferenceResult) { ran->set_value(std::this_thread::get_id()); },
                    Result(floats));
  return testing::GetWithin(on, "the completion callback");
}

TEST(CompletionExecutorTest, SmallOutputsInlineBigOnesOnACompletionThread) {
  CompletionExecutor executor(1, /*inline_max_bytes=*/64);
  const std::thread::id here = std::this_thread::get_id();
  EXPECT_EQ(CompletedOn(executor, 16), here);  // 64 bytes: not over the limit
  EXPECT_EQ(CompletedOn(executor, 0), here);   // no output (a failure's answer)
  const std::thread::id big = CompletedOn(executor, 17);
  EXPECT_NE(big, here);
  EXPECT_NE(big, std::thread::id());
  EXPECT_EQ(CompletedOn(executor, 1 << 20), big) << "one completion thread";
}

TEST(CompletionExecutorTest, WithoutThreadsEverythingIsInline) {
  CompletionExecutor executor(0, /*inline_max_bytes=*/0);
  EXPECT_EQ(CompletedOn(executor, 1 << 20), std::this_thread::get_id());
}

// Two completions wait behind a held one when Shutdown is called (by the busy completion thread
// itself, so that they are certainly queued then): both still run, in order, before Shutdown
// returns; a completion after Shutdown runs inline.
TEST(CompletionExecutorTest, ShutdownRunsWhatIsQueuedThenCompletesInline) {
  CompletionExecutor executor(1, /*inline_max_bytes=*/0);
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<int> ran;
  std::thread::id completion_thread;
  executor.Complete(
      [&](InferenceResult) {
        std::unique_lock<std::mutex> lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return open; })) << "the gate never opened";
        completion_thread = std::this_thread::get_id();
        ran.push_back(1);
        lock.unlock();
        executor.Shutdown();  // from the completion thread: closes, does not join itself
      },
      Result(1));
  for (int id : {2, 3}) {
    executor.Complete(
        [&, id](InferenceResult) {
          std::lock_guard<std::mutex> lock(mu);
          EXPECT_EQ(std::this_thread::get_id(), completion_thread) << id;
          ran.push_back(id);
        },
        Result(1));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
  }
  cv.notify_all();
  executor.Shutdown();  // joins: every queued completion has run
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  }
  EXPECT_EQ(CompletedOn(executor, 1 << 20), std::this_thread::get_id());
  executor.Shutdown();  // idempotent
}

TEST(CompletionExecutorTest, AThrowingCallbackIsContained) {
  CompletionExecutor executor(1, /*inline_max_bytes=*/64);
  EXPECT_NO_THROW(executor.Complete(
      [](InferenceResult) { throw std::runtime_error("inline callback failed"); }, Result(1)));
  executor.Complete([](InferenceResult) { throw std::runtime_error("callback failed"); },
                    Result(1 << 10));
  executor.Complete([](InferenceResult) { throw 7; }, Result(1 << 10));
  EXPECT_NE(CompletedOn(executor, 1 << 10), std::thread::id()) << "the thread survived";
}

TEST(CompletionExecutorTest, EveryCallbackRunsExactlyOnceUnderLoad) {
  constexpr int kThreads = 4, kEach = 200;
  std::mutex mu;
  std::map<int, int> calls;
  {
    CompletionExecutor executor(2, /*inline_max_bytes=*/64);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          const int id = t * kEach + i;
          executor.Complete(
              [&, id](InferenceResult) {
                std::lock_guard<std::mutex> lock(mu);
                ++calls[id];
              },
              Result(id % 3 == 0   ? 0
                     : id % 2 == 0 ? 16
                                   : 1024));
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }  // ~CompletionExecutor: Shutdown
  ASSERT_EQ(calls.size(), static_cast<size_t>(kThreads * kEach));
  for (const auto& [id, n] : calls) EXPECT_EQ(n, 1) << "completion " << id;
}

}  // namespace completion_executor_test
}  // namespace mha::serve
