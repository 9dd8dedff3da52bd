#include "server/serving/scheduling/direct_runner.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <thread>
#include <utility>

#include "server/serving/observability/metrics.h"
#include "server/serving/scheduling/batch_assembly.h"

namespace mha::serve {

DirectRunner::DirectRunner(DirectRunnerOptions options, ModelMetrics* metrics)
    : options_(options), metrics_(metrics) {
  const int n = options_.workers > 0 ? options_.workers : 1;
  workers_.reserve(n);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  for (int i = 0; i < options_.completion_threads; ++i) {
    completion_threads_.emplace_back([this] { CompletionLoop(); });
  }
}

DirectRunner::~DirectRunner() { Shutdown(); }

void DirectRunner::Submit(InferenceTask task, DoneCallback done) {
  Status refused;
  size_t depth = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      refused = Unavailable("server is shutting down");
    } else if (queue_.size() >= options_.max_queue_size) {
      refused = QueueFull(queue_.size(), task.model_name, options_.max_queue_size);
    } else {
      queue_.push_back(Entry{std::move(task), std::move(done)});
    }
    depth = queue_.size();
  }
  if (metrics_) metrics_->SetQueueDepth(static_cast<int64_t>(depth));
  if (!refused.ok()) {
    Refuse(task, done, std::move(refused));
    return;
  }
  cv_.notify_one();
}

void DirectRunner::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& worker : workers_) {
    if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
  }
  {
    std::lock_guard<std::mutex> lock(completion_mu_);
    completions_closed_ = true;  // no worker is left to add completions
  }
  completion_cv_.notify_all();
  for (auto& thread : completion_threads_) {
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }
}

size_t DirectRunner::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void DirectRunner::WorkerLoop() {
  for (;;) {
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    InferenceResult result = Run(entry.task);
    RecordPass(entry.task, result);
    entry.task = InferenceTask();  // drop the inputs (they may borrow the request) first
    const at::Tensor& out = result.outputs.output;
    const bool big = out.defined() && static_cast<int64_t>(out.numel() * out.element_size()) >
                                          options_.inline_completion_max_bytes;
    if (big && !completion_threads_.empty()) {
      {
        std::lock_guard<std::mutex> lock(completion_mu_);
        completions_.push_back(Completion{std::move(entry.done), std::move(result)});
      }
      completion_cv_.notify_one();
    } else {
      Complete(entry.done, std::move(result));
    }
  }
}

void DirectRunner::RecordPass(const InferenceTask& task, const InferenceResult& result) {
  if (!metrics_) return;
  size_t depth = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    depth = queue_.size();
  }
  metrics_->SetQueueDepth(static_cast<int64_t>(depth));
  if (!result.status.ok()) return;
  // A pass of one request: the batch series exist with batching off too.
  const RequestShape shape = ShapeOf(task.inputs);
  const TokenCount tokens = CountTokens({shape}, task.inputs.key.defined());
  metrics_->RecordBatch(1, shape.rows, tokens.real, tokens.padded);
}

void DirectRunner::CompletionLoop() {
  for (;;) {
    Completion completion;
    {
      std::unique_lock<std::mutex> lock(completion_mu_);
      completion_cv_.wait(lock, [this] { return completions_closed_ || !completions_.empty(); });
      if (completions_.empty()) return;  // closed and drained
      completion = std::move(completions_.front());
      completions_.pop_front();
    }
    Complete(completion.done, std::move(completion.result));
  }
}

void DirectRunner::Complete(DoneCallback& done, InferenceResult result) {
  try {
    done(std::move(result));
  } catch (const std::exception& e) {
    spdlog::error("runner: completion callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("runner: completion callback threw a non-std exception");
  }
}

InferenceResult DirectRunner::Run(InferenceTask& task) const {
  InferenceResult result;
  const auto start = Clock::now();
  result.queue_us = MicrosBetween(task.enqueue_time, start);
  result.status = DropBeforeCompute(task, start);
  if (!result.status.ok()) return result;
  if (!task.model) {
    result.status = Internal("task without a model");
    return result;
  }
  if (options_.debug_forward_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.debug_forward_delay_ms));
  }
  try {
    result.status = task.step ? RunSessionStep(task, &result.outputs)
                              : task.model->ForwardValidated(task.inputs, &result.outputs);
  } catch (const std::exception& e) {
    result.status = Internal(std::string("forward pass failed: ") + e.what());
  }
  result.compute_us = MicrosBetween(start, Clock::now());
  if (!result.status.ok()) result.outputs = ForwardOutputs();
  return result;
}

}  // namespace mha::serve
