// ForwardPlanner: the WorkQueue planner (work_queue.h) of forwards and one-layer session steps:
// the group-key merge (Triton's dynamic batcher). The oldest task goes first with the later tasks
// of its GroupKey (batch_assembly.h: self/cross, causal, weights flags, dtypes, length bucket)
// while the pass stays within max_batch_rows (sum of B), max_batch_tokens (padded) and
// --max-work-bytes (the merged pass's estimate); it runs when full, else once the oldest task has
// waited max_queue_delay_us (at once when a deadline would pass meanwhile). A task joins only while
// the pass's estimated time fits every deadline in it. Batching off: one task per pass, at once.
// Session steps (InferenceTask::step) of several sessions run as one DecodeSteps pass. A failed
// merged pass is retried task by task, so one bad request cannot fail others.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "server/serving/kinds/multihead/batch_assembly.h"
#include "server/serving/kinds/multihead/merge/pass_runner.h"
#include "server/serving/scheduling/runner.h"
#include "server/serving/scheduling/work_queue.h"

namespace mha::serve {

struct ForwardItem {
  InferenceTask task;
  DoneCallback done;
  GroupKey key;
  RequestShape shape;
};

class ForwardPlanner {
 public:
  using Item = ForwardItem;
  struct Running {};
  static constexpr const char* kPass = "forward pass";
  static constexpr const char* kItems = "requests";

  // `max_work_bytes`: a merged pass's estimated working memory stays within it (--max-work-bytes;
  // one task alone may exceed it only if it was admitted on its own).
  ForwardPlanner(BatchModelInfo info, std::unique_ptr<PassRunner> passes, int64_t max_work_bytes)
      : info_(info), passes_(std::move(passes)), max_work_bytes_(max_work_bytes) {}

  // The task as queued: its group key and shape.
  static ForwardItem Make(InferenceTask task, DoneCallback done);

  Clock::time_point Deadline(const Item& item) const { return item.task.deadline; }
  // The thread that submitted a stateless forward (InferenceTask::caller), taken out of the task:
  // it may run the pass itself; a session step's never (it may be submitted by the step before it,
  // from a worker).
  static CallerThread TakeCaller(Item& item) {
    const CallerThread caller = std::exchange(item.task.caller, CallerThread());
    return item.task.step ? CallerThread() : caller;
  }
  bool Cancelled(const Item& item) const {
    return item.task.is_cancelled && item.task.is_cancelled();
  }
  PassSize Alone(const Item& item) const;
  PassPlan<Item> PlanLocked(Queue<Item>& queue, Clock::time_point now,
                            const PassContext& context) const;
  Running StartLocked(const std::vector<Queued<Item>>&) { return {}; }
  void FinishLocked(const Running&) {}
  void Run(std::vector<Queued<Item>>& batch, PassContext& context) const;
  void Refuse(Queued<Item>& item, Status status, int64_t queue_us, PassContext& context) const;

 private:
  InferenceResult RunAlone(Queued<Item>& entry, PassContext& context) const;
  void RunMerged(std::vector<Queued<Item>>& batch, PassContext& context) const;
  // Session steps of several sessions: one DecodeSteps pass (retried alone on failure).
  void RunSteps(std::vector<Queued<Item>>& batch, PassContext& context) const;
  static void Answer(Queued<Item>& entry, InferenceResult result, PassContext& context);

  BatchModelInfo info_;
  std::unique_ptr<PassRunner> passes_;
  int64_t max_work_bytes_;
};

}  // namespace mha::serve
