// LayerStepScheduler: the one scheduler of a Llama-family model version: its per-layer step
// messages (mha.v1 LayerSteps, docs/afd.md) and its stateless forwards (InferenceTask::layer over
// a query, one per pass) in one queue: the shared queue/worker core (scheduling/work_queue.h: queue
// limit, instances, deadline and cancel drops, drops on the pass-time estimate, the queue-depth
// gauge, off-worker completion of big answers) with the layer planner below.
//
// Planning: a message comes here when its turn at the session gate came (LlamaSessions::
// Acquire), so no two queued or running messages share a session and each session's steps apply
// in arrival order. A worker takes the oldest message, then every later message of the same layer
// while the pass's new tokens stay within max_batch_tokens (one message alone may exceed it: the
// Llama kind counts new tokens of one layer, where the one-layer kind counts a merged pass's
// padded tokens). With max_queue_delay_us 0 (the default) a pass starts as soon as a worker is
// free. With batching off (--batching off, config.json "batching": false) each message runs alone.
//
// A pass: each message's entries are prepared (LlamaSessions::Prepare: the session still
// open, the layer-order rule, max_tokens, room in the pool); a message with a refused entry is
// answered with that refusal ("entry i: ...") and leaves the pass; the others run as one
// StepLlamaSessions. If the merged pass fails (INTERNAL: every cache is back at its length), each
// message runs alone, so one message cannot fail others. A message's sessions are released
// (LlamaSessions::Finish) on the worker, then its answer is delivered.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mha/llama_engine.h"
#include "server/serving/clock.h"
#include "server/serving/kinds/llama/llama_sessions.h"
#include "server/serving/layer_step.h"
#include "server/serving/scheduling/batcher_options.h"
#include "server/serving/scheduling/runner.h"
#include "server/serving/scheduling/work_queue.h"

namespace mha::serve {

class StatsAggregator;

// A stateless forward of the stack: LlamaForward of task.layer over task.inputs.query, alone in
// its pass; answered as ModelRunner::Submit's.
struct LlamaForwardWork {
  InferenceTask task;
  DoneCallback done;
};

// One message, validated, its sessions held, or a stateless forward: what Submit queues.
struct LayerStepTask {
  int64_t layer = 0;
  LlamaSessions::Hold hold;        // its sessions, one per entry, distinct
  std::vector<HostTensor> hidden;  // [t, E] per entry
  ElementType output = ElementType::kFloat32;
  Clock::time_point deadline = Clock::time_point::max();
  std::function<bool()> is_cancelled;
  std::string request_id;
  LayerStepDone done;  // status, outputs, layer_tokens, timings (model/version left to the caller)
  int64_t tokens = 0;  // new tokens of every entry, or the forward's B * T (set by Submit)
  std::shared_ptr<LlamaForwardWork> forward;  // set: a stateless forward, not a step message
};

class LayerPlanner {
 public:
  using Item = LayerStepTask;
  struct Running {};
  static constexpr const char* kPass = "layer step";
  static constexpr const char* kItems = "requests";

  LayerPlanner(std::shared_ptr<const LlamaAttentionStack> stack, LlamaSessions* sessions)
      : stack_(std::move(stack)), sessions_(sessions) {}

  Clock::time_point Deadline(const Item& item) const {
    return item.forward ? item.forward->task.deadline : item.deadline;
  }
  bool Cancelled(const Item& item) const;
  // The thread that submitted a stateless forward (taken out of its task) may run its pass; a
  // step message's never (work_queue.h).
  static CallerThread TakeCaller(Item& item) {
    if (!item.forward) return CallerThread();
    return std::exchange(item.forward->task.caller, CallerThread());
  }
  PassSize Alone(const Item& item) const { return PassSize{!item.forward, item.tokens}; }
  PassPlan<Item> PlanLocked(Queue<Item>& queue, Clock::time_point now,
                            const PassContext& context) const;
  Running StartLocked(const std::vector<Queued<Item>>&) { return {}; }
  void FinishLocked(const Running&) {}
  void Run(std::vector<Queued<Item>>& batch, PassContext& context) const;
  void Refuse(Queued<Item>& item, Status status, int64_t queue_us, PassContext& context) const;

 private:
  // Prepares each message's sessions; answers the refused ones. The rest, in order.
  std::vector<Queued<Item>*> Prepare(std::vector<Queued<Item>>& batch, Clock::time_point start,
                                     PassContext& context) const;
  // One StepLlamaSessions over `batch` (prepared messages), each message's answer filled.
  Status Step(std::vector<Queued<Item>*>& batch, std::vector<LayerStepResponse>* answers,
              PassContext& context) const;
  // Releases the message's sessions, then delivers its answer.
  void Answer(Queued<Item>& queued, LayerStepResponse response, PassContext& context) const;
  // A stateless forward: its pass, its answer.
  void RunForward(Queued<Item>& queued, PassContext& context) const;
  static void AnswerForward(Queued<Item>& queued, InferenceResult result, PassContext& context);

  std::shared_ptr<const LlamaAttentionStack> stack_;
  LlamaSessions* sessions_;
};

class LayerStepScheduler {
 public:
  // `stack`, `sessions` (the version's store, which outlives the scheduler) and `metrics` (may be
  // null) are the version's; `model_name` labels logs and errors. `options`: the version's
  // BatcherOptions (max_batch_tokens caps a merged pass's new tokens; batching off: one message
  // per pass).
  static std::unique_ptr<LayerStepScheduler> Create(
      const BatcherOptions& options, std::shared_ptr<const LlamaAttentionStack> stack,
      LlamaSessions* sessions, std::string model_name, StatsAggregator* metrics);
  ~LayerStepScheduler() { Shutdown(); }
  LayerStepScheduler(const LayerStepScheduler&) = delete;
  LayerStepScheduler& operator=(const LayerStepScheduler&) = delete;

  // Queues `task`, or answers it at once (RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE
  // after Shutdown), its sessions released either way once it is answered.
  void Submit(LayerStepTask task);
  // Queues a stateless forward (validated: ValidateLlamaForward) as ModelRunner::Submit does.
  void SubmitForward(InferenceTask task, DoneCallback done);
  // Stops accepting, runs every queued message, joins the workers. Idempotent.
  void Shutdown() { queue_.Shutdown(); }
  size_t queue_depth() const { return queue_.depth(); }

 private:
  LayerStepScheduler(const BatcherOptions& options,
                     std::shared_ptr<const LlamaAttentionStack> stack, LlamaSessions* sessions,
                     std::string model_name, StatsAggregator* metrics)
      : queue_(LayerPlanner(std::move(stack), sessions), options, std::move(model_name), metrics) {}

  WorkQueue<LayerPlanner> queue_;
};

}  // namespace mha::serve
