// LayerStepScheduler: the scheduler of one Llama-family model version's per-layer step messages
// (mha.v1 LayerSteps, docs/afd.md), in the style of the dynamic batcher (dynamic_batcher.h): a
// bounded arrival-ordered queue and one worker that merges messages into passes.
//
// Scheduling: a message holds its sessions (LlamaSessionStore::Acquire) from Submit on. The worker
// takes the oldest message, then every later message of the same layer whose sessions appear in
// no earlier message still queued (so each session's steps apply in arrival order, whatever
// stream they came on) while the pass's new tokens stay within max_pass_tokens (one message alone
// may exceed it). With max_queue_delay_us 0 (the default) a pass starts as soon as the worker is
// free: passes form from what queued during the previous one. Expired (DEADLINE_EXCEEDED) and
// cancelled (CANCELLED) messages are answered before compute; a full queue is RESOURCE_EXHAUSTED
// inline in Submit.
//
// A pass: each message's entries are prepared (LlamaSessionStore::Prepare: the session still
// open, the layer-order rule, max_tokens, room in the pool); a message with a refused entry is
// answered with that refusal ("entry i: ...") and leaves the pass; the others run as one
// StepLlamaSessions. If the merged pass fails (INTERNAL: every cache is back at its length), each
// message runs alone, so one message cannot fail others. Answers are delivered on the worker, in
// pass order, after the message's sessions are released (LlamaSessionStore::Finish).
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

#include "mha/llama_engine.h"
#include "server/serving/clock.h"
#include "server/serving/layer_step.h"
#include "server/serving/llama/llama_session_store.h"
#include "server/serving/scheduling/blas_policy.h"

namespace mha::serve {

class StatsAggregator;

struct LayerStepSchedulerOptions {
  size_t max_queue_size = 64;      // messages waiting (not counting the pass running)
  int64_t max_pass_tokens = 2048;  // new tokens of a merged pass; one message alone may exceed
  int64_t max_queue_delay_us = 0;  // how long the oldest message may wait for company
  BlasPolicyOptions blas;          // OpenBLAS threads per pass (blas_policy.h)
  const ClockSource* clock = &RealClock();
  // Runs each pass: must call `pass` once and return its status (the test server's hold gate).
  std::function<Status(const std::function<Status()>& pass)> pass_hook;
};

// One message, validated, its sessions held: what Submit queues.
struct LayerStepTask {
  int64_t layer = 0;
  std::vector<LlamaSessionRef> sessions;  // one per entry, distinct
  std::vector<HostTensor> hidden;         // [t, E] per entry
  ElementType output = ElementType::kFloat32;
  Clock::time_point deadline = Clock::time_point::max();
  std::function<bool()> is_cancelled;
  std::string request_id;
  LayerStepDone done;  // status, outputs, layer_tokens, timings (model/version left to the caller)
};

class LayerStepScheduler {
 public:
  // `stack`, `sessions` (the version's store, which outlives the scheduler) and `metrics` (may be
  // null) are the version's; `model_name` labels logs and errors.
  static std::unique_ptr<LayerStepScheduler> Create(
      const LayerStepSchedulerOptions& options, std::shared_ptr<const LlamaAttentionStack> stack,
      LlamaSessionStore* sessions, std::string model_name, StatsAggregator* metrics);
  ~LayerStepScheduler();  // Shutdown
  LayerStepScheduler(const LayerStepScheduler&) = delete;
  LayerStepScheduler& operator=(const LayerStepScheduler&) = delete;

  // Queues `task`, or answers it at once (RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE
  // after Shutdown), its sessions released either way once it is answered.
  void Submit(LayerStepTask task);
  // Stops accepting, runs every queued message, joins the worker. Idempotent.
  void Shutdown();
  size_t queue_depth() const;

 private:
  struct Queued {
    LayerStepTask task;
    int64_t tokens = 0;
    Clock::time_point arrival;
  };
  using Queue = std::list<Queued>;

  LayerStepScheduler(const LayerStepSchedulerOptions& options,
                     std::shared_ptr<const LlamaAttentionStack> stack, LlamaSessionStore* sessions,
                     std::string model_name, StatsAggregator* metrics);
  Clock::time_point Now() const { return options_.clock->Now(); }
  void WorkerLoop();
  // With mu_ held: the messages of the next pass (oldest first); `full` when nothing more may join.
  std::vector<Queue::iterator> PlanLocked(bool* full);
  // With mu_ held: expired and cancelled messages out of the queue, with their refusals.
  void SweepLocked(Clock::time_point now, std::vector<std::pair<Queued, Status>>* dropped);
  void RunPass(std::vector<Queued>& batch);
  // One StepLlamaSessions over `batch` (prepared messages), each message's answer filled.
  Status Step(std::vector<Queued*>& batch, std::vector<LayerStepResponse>* answers) const;
  // Releases the message's sessions, then calls its `done`.
  void Answer(Queued& queued, LayerStepResponse response) const;

  const LayerStepSchedulerOptions options_;
  const std::shared_ptr<const LlamaAttentionStack> stack_;
  LlamaSessionStore* const sessions_;
  const std::string model_name_;
  StatsAggregator* const metrics_;
  const BlasPassPolicy blas_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Queue queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace mha::serve
