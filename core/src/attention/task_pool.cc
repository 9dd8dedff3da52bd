#include "attention/task_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mha::internal {
namespace {

class TaskPool {
 public:
  ~TaskPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // False (nothing run) when another job holds the helpers.
  bool TryRun(int helpers, int64_t tasks, const std::function<void(int64_t)>& task) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (static_cast<int>(threads_.size()) < helpers) {
        const int index = static_cast<int>(threads_.size());
        threads_.emplace_back([this, index] { Loop(index); });
      }
      task_ = &task;
      tasks_ = tasks;
      next_.store(0, std::memory_order_relaxed);
      invited_ = helpers;
      working_ = helpers;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    Work();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return working_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // Takes tasks until none is left; the first exception stops the others from taking more.
  void Work() {
    for (int64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < tasks_;) {
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(tasks_, std::memory_order_relaxed);
      }
    }
  }

  void Loop(int index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= invited_) continue;
      lock.unlock();
      Work();
      lock.lock();
      if (--working_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;  // held by the job using the helpers
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;  // guarded by mu_
  uint64_t generation_ = 0;           // guarded by mu_: one more per job
  int invited_ = 0, working_ = 0;     // guarded by mu_
  bool stop_ = false;                 // guarded by mu_
  std::exception_ptr error_;          // guarded by mu_
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t tasks_ = 0;
  std::atomic<int64_t> next_{0};
};

TaskPool& Pool() {
  static TaskPool pool;
  return pool;
}

}  // namespace

void RunTasks(int threads, int64_t tasks, const std::function<void(int64_t)>& task) {
  const int helpers = static_cast<int>(std::min<int64_t>(threads, tasks)) - 1;
  if (helpers < 1 || !Pool().TryRun(helpers, tasks, task)) {
    for (int64_t i = 0; i < tasks; ++i) task(i);
  }
}

}  // namespace mha::internal
