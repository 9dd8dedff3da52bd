#include "server/serving/scheduling/completion_executor.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <utility>

namespace mha::serve {

CompletionExecutor::CompletionExecutor(int threads, int64_t inline_max_bytes)
    : inline_max_bytes_(inline_max_bytes) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

CompletionExecutor::~CompletionExecutor() { Shutdown(); }

void CompletionExecutor::Complete(DoneCallback done, InferenceResult result) {
  const auto bytes = static_cast<int64_t>(result.outputs.output.bytes());
  Deliver(
      [done = std::move(done), result = std::move(result)]() mutable { done(std::move(result)); },
      bytes);
}

void CompletionExecutor::Deliver(std::function<void()> answer, int64_t bytes) {
  if (bytes > inline_max_bytes_) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!closed_ && !threads_.empty()) {
      queue_.push_back(std::move(answer));
      lock.unlock();
      cv_.notify_one();
      return;
    }
  }
  RunInline(answer);
}

void CompletionExecutor::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }
}

void CompletionExecutor::Loop() {
  for (;;) {
    std::function<void()> answer;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return closed_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closed and drained
      answer = std::move(queue_.front());
      queue_.pop_front();
    }
    RunInline(answer);
  }
}

void CompletionExecutor::RunInline(std::function<void()>& answer) {
  try {
    answer();
  } catch (const std::exception& e) {
    spdlog::error("scheduler: completion callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("scheduler: completion callback threw a non-std exception");
  }
}

}  // namespace mha::serve
