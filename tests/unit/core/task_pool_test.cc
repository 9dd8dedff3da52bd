// RunTasks (attention/task_pool.h), the threads a pass's paged attention spreads over: every task
// runs exactly once whatever the threads; two threads asked for are two threads at once (each of
// two tasks waits for the other to start); a task's exception comes back to the caller; callers
// on several threads at once each get all their tasks run.
#include "attention/task_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace mha::internal {
namespace task_pool_test {

TEST(TaskPoolTest, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    for (int64_t tasks : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      RunTasks(threads, tasks, [&](int64_t i) { runs[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < tasks; ++i) {
        EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1)
            << "task " << i << " of " << tasks << " on " << threads << " threads";
      }
    }
  }
}

TEST(TaskPoolTest, TwoThreadsRunTwoTasksAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::set<std::thread::id> ids;
  bool both = true;
  RunTasks(2, 2, [&](int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
    ++started;
    cv.notify_all();
    // A gate, not a timing: each task waits for the other to start; one thread alone never would.
    both = cv.wait_for(lock, std::chrono::seconds(60), [&] { return started == 2; }) && both;
  });
  EXPECT_TRUE(both);
  EXPECT_EQ(ids.size(), 2u);
}

TEST(TaskPoolTest, ATasksExceptionComesBackToTheCaller) {
  std::atomic<int> ran{0};
  EXPECT_THROW(RunTasks(2, 50,
                        [&](int64_t i) {
                          ran.fetch_add(1);
                          if (i == 3) throw std::runtime_error("task 3");
                        }),
               std::runtime_error);
  EXPECT_GE(ran.load(), 1);
  std::atomic<int> after{0};
  RunTasks(2, 10, [&](int64_t) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 10) << "the pool works after an exception";
}

TEST(TaskPoolTest, CallersOnSeveralThreadsEachGetAllTheirTasksRun) {
  constexpr int kCallers = 4;
  constexpr int64_t kTasks = 500;
  std::vector<std::atomic<int64_t>> sums(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 20; ++round) {
        RunTasks(2, kTasks, [&](int64_t i) { sums[static_cast<size_t>(c)].fetch_add(i + 1); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(sums[static_cast<size_t>(c)].load(), 20 * kTasks * (kTasks + 1) / 2)
        << "caller " << c;
  }
}

}  // namespace task_pool_test
}  // namespace mha::internal
