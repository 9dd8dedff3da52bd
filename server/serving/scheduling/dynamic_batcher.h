// DynamicBatcher: the one scheduler of a model handle (Triton's dynamic batcher): a bounded queue
// and `instances` worker threads that merge concurrent requests of one model into one forward
// pass. Batching off (BatcherOptions::batching = false, mha-server --batching off) is the same
// scheduler with one request per pass: the same queue, drops, errors, metrics and completions.
// Answers go through one CompletionExecutor: big outputs are encoded and sent off the worker.
//
// Scheduling: tasks wait in one arrival-ordered queue. A free worker ("instance") takes the
// oldest task, then the later tasks with the same GroupKey (batch_assembly.h: self/cross, causal,
// weights flags, dtypes, length bucket) while the batch stays within max_batch_rows (sum of B) and
// max_batch_tokens (padded). It runs the batch at once when it is full, else when the oldest task
// has waited max_queue_delay_us (at once if a task's deadline comes sooner). The oldest task's
// group always goes first, so no group starves. Expired (DEADLINE_EXCEEDED) and cancelled
// (CANCELLED) tasks are dropped before compute; a full queue is RESOURCE_EXHAUSTED inline in
// Submit. Session steps (InferenceTask::step) merge with steps of other sessions into one
// DecodeSteps pass; decode steps (T = 1) and prefill chunks (T > 1) form separate groups, so a
// long prefill never holds decode steps in its pass (docs/sessions.md). Tasks come validated
// (ServerCore::Infer): the batcher trusts them. If a merged pass fails, each of its tasks is
// retried alone so one bad request cannot fail others.
//
// No work for answers nobody will read (issue 26): the batcher keeps the model's measured pass
// times (PassTimeEstimator: an EWMA per padded-token bucket). A task whose remaining deadline is
// shorter than the estimated time of its pass alone is DEADLINE_EXCEEDED before compute, and a
// task joins a merged pass only while the pass's estimated time (with it) fits the remaining
// deadline of every task in it; the others wait for a later pass.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/serving/clock.h"
#include "server/serving/scheduling/batch_assembly.h"
#include "server/serving/scheduling/blas_policy.h"
#include "server/serving/scheduling/completion_executor.h"
#include "server/serving/scheduling/merge/pass_runner.h"
#include "server/serving/scheduling/pass_time_estimator.h"
#include "server/serving/scheduling/runner.h"
#include "server/serving/serving_defaults.h"

namespace mha::serve {

class StatsAggregator;

struct BatcherOptions {
  // false: one request per pass (the merging limits below do not apply); true: merged passes.
  bool batching = true;
  int64_t max_batch_rows = 64;  // sum of the requests' B in one pass
  // Padded tokens of one pass (CountTokens); one task may exceed it. Bigger CPU passes fall off a
  // cliff (docs/benchmarks.md); raise it on a GPU.
  int64_t max_batch_tokens = 2048;
  // How long the oldest task may wait for company. 0, as Triton's default: a request is never held
  // back while an instance is free; under load batches form anyway from what queued during the
  // previous pass. A delay > 0 trades latency at low load for fuller batches (1000 us added ~1.5
  // ms to p50 at one call in flight).
  int64_t max_queue_delay_us = 0;
  size_t max_queue_size = 64;  // tasks waiting (not counting those being computed)
  // Worker threads (concurrent passes) for the model. 1: OpenBLAS threads every GEMM itself.
  // Measured on 2 cores: 2 instances raised 64-client small-request throughput ~12% (839 vs 750
  // req/s) but cut B=8,T=128 served throughput to 0.64x in-process (0.89x with 1). Raise it per
  // model (config.json "instances") where passes are small.
  int instances = 1;
  // Estimated working memory of one merged pass (server/serving/budget.h); one task alone may
  // exceed it only if it was admitted on its own (ServerCore checks each request against the same
  // limit).
  int64_t max_batch_work_bytes = kDefaultMaxWorkBytes;
  // Answers whose output is bigger are delivered on a completion thread (encoding and gRPC's
  // Finish copy it), so that the worker goes straight on to the next pass; smaller ones inline.
  int completion_threads = 1;
  int64_t inline_completion_max_bytes = 256 << 10;
  // The estimated time (microseconds) of a pass of `padded_tokens` tokens (`session`: a pass of
  // session steps); unset = the batcher's own PassTimeEstimator over its measured passes. Tests
  // inject a fake one; 0 = no estimate (nothing is refused on it).
  std::function<double(bool session, int64_t padded_tokens)> estimate_pass_us;
  // OpenBLAS threads per pass (blas_policy.h): by default all cores for a lone request, 1 under
  // load.
  BlasPolicyOptions blas;
  // Where the batcher reads the time: arrivals, the queue delay, deadlines, queue and compute
  // times. Tests drive it with a FakeClock (server/serving/clock.h) instead of sleeping.
  const ClockSource* clock = &RealClock();
  // Runs each forward pass (a request pass, merged or alone, or a pass of session steps): it must
  // call `pass` once and return its status. Unset (mha-server): the pass runs directly. The test
  // seam of the serving path: tests/service/mha_test_server.cc holds passes at a gate with it.
  std::function<Status(const std::function<Status()>& pass)> pass_hook;
};

class DynamicBatcher final : public ModelRunner {
 public:
  // `metrics` may be null; `model_name` labels the metrics and logs. `passes` runs the passes
  // (merge/pass_runner.h: a real model's, or a test's fake forward).
  DynamicBatcher(std::string model_name, BatchModelInfo info, std::unique_ptr<PassRunner> passes,
                 BatcherOptions options, StatsAggregator* metrics = nullptr);
  // The same over a forward function (MakePassRunner(info, forward)): tests' fakes.
  DynamicBatcher(std::string model_name, BatchModelInfo info, BatchForwardFn forward,
                 BatcherOptions options, StatsAggregator* metrics = nullptr);
  // The batcher of a real model: MakeModelPassRunner and its BatchModelInfo.
  static std::unique_ptr<DynamicBatcher> ForModel(std::shared_ptr<const MhaModel> model,
                                                  std::string model_name, BatcherOptions options,
                                                  StatsAggregator* metrics = nullptr);
  ~DynamicBatcher() override;

  void Submit(InferenceTask task, DoneCallback done) override;
  void Shutdown() override;
  size_t queue_depth() const override;

  const BatcherOptions& options() const { return options_; }

 private:
  struct Entry {
    InferenceTask task;
    DoneCallback done;
    GroupKey key;
    RequestShape shape;
    Clock::time_point arrival;  // Submit time: the batching delay counts from here
  };
  using Queue = std::list<Entry>;
  struct Dropped {
    Entry entry;
    Status status;
  };

  void WorkerLoop();
  // With mu_ held: moves expired and cancelled tasks to `dropped`.
  void SweepLocked(Clock::time_point now, std::vector<Dropped>* dropped);
  // With mu_ held: the tasks of the oldest task's group that fit in one pass, oldest first
  // (and whose deadlines the pass's estimated time fits). `full` when nothing more could join;
  // `dispatch_at` when the batch should go anyway.
  std::vector<Queue::iterator> PlanLocked(Clock::time_point now, bool* full,
                                          Clock::time_point* dispatch_at);
  Clock::time_point Now() const { return options_.clock->Now(); }
  // `pass` through options_.pass_hook when one is set.
  Status RunPass(const std::function<Status()>& pass) const;
  double EstimatePassUs(bool session, int64_t padded_tokens) const;
  void RecordPass(bool session, int64_t padded_tokens, int64_t micros) const;
  void RunBatch(std::vector<Entry>& batch);
  // Session steps of several sessions: one DecodeSteps pass (retried alone on failure).
  void RunStepBatch(std::vector<Entry>& batch);
  InferenceResult RunAlone(Entry& entry) const;
  void Answer(Entry& entry, InferenceResult result);
  void PublishDepthLocked() const;

  const std::string model_name_;
  const BatchModelInfo info_;
  const std::unique_ptr<PassRunner> passes_;
  const BatcherOptions options_;
  StatsAggregator* const metrics_;
  const BlasPassPolicy blas_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Queue queue_;
  bool stopping_ = false;
  // The last pass planned held one request and left the queue empty (blas_policy.h's "lone" needs
  // two such passes in a row).
  bool last_pass_alone_ = true;
  mutable PassTimeEstimator pass_times_;  // internally synchronized; RunAlone is const
  CompletionExecutor completions_;        // before the workers: they use it until joined
  std::vector<std::thread> workers_;
};

}  // namespace mha::serve
