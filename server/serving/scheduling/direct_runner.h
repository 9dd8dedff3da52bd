// DirectRunner: the scheduler of one model handle when batching is off: a bounded FIFO queue and
// N worker threads, one forward pass per task (recorded in the model's metrics as a batch of one).
// Completions whose output is big (encoding it and gRPC's Finish take milliseconds of copying and
// socket writes) are handed to completion threads, so that a worker goes straight on to the next
// forward pass; small ones complete inline on the worker (no extra thread hop on the latency).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "server/serving/scheduling/runner.h"

namespace mha::serve {

class ModelMetrics;

struct DirectRunnerOptions {
  // 1: OpenBLAS already threads each GEMM over every core; measured on 2 cores, B=8 T=128:
  // 2 workers = 26 req/s, 1 worker = 37 req/s (mha-server --workers 0 = cores / intra-op threads).
  int workers = 1;
  size_t max_queue_size = 64;  // tasks waiting (not counting those being computed)
  int completion_threads = 1;
  int64_t inline_completion_max_bytes = 256 << 10;  // bigger outputs go to completion threads
  int64_t debug_forward_delay_ms = 0;               // test-only: each pass first sleeps this long
};

class DirectRunner final : public ModelRunner {
 public:
  // `metrics` (not owned, may be null) receives the queue depth and each pass.
  explicit DirectRunner(DirectRunnerOptions options, ModelMetrics* metrics = nullptr);
  ~DirectRunner() override;

  void Submit(InferenceTask task, DoneCallback done) override;
  void Shutdown() override;
  size_t queue_depth() const override;

 private:
  struct Entry {
    InferenceTask task;
    DoneCallback done;
  };
  struct Completion {
    DoneCallback done;
    InferenceResult result;
  };
  void WorkerLoop();
  void CompletionLoop();
  InferenceResult Run(InferenceTask& task) const;
  void RecordPass(const InferenceTask& task, const InferenceResult& result);
  static void Complete(DoneCallback& done, InferenceResult result);

  const DirectRunnerOptions options_;
  ModelMetrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;

  std::mutex completion_mu_;
  std::condition_variable completion_cv_;
  std::deque<Completion> completions_;
  bool completions_closed_ = false;  // set once every worker has exited
  std::vector<std::thread> completion_threads_;
};

}  // namespace mha::serve
