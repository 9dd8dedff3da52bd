// WorkQueue: the one queue/worker core of every scheduler (Triton's shared queue and instance
// threads under its dynamic and sequence batchers). It owns what every scheduler does the same
// way, once:
//   - a bounded arrival-ordered queue: a full queue is RESOURCE_EXHAUSTED inline in Submit, a
//     stopped one UNAVAILABLE;
//   - `instances` worker threads, each taking the next pass the planner forms;
//   - the sweep before every plan: DEADLINE_EXCEEDED when an item's deadline passed, CANCELLED
//     when its call was cancelled, DEADLINE_EXCEEDED when the estimated time of its pass alone
//     is longer than its deadline leaves (PassTimeEstimator over the measured passes);
//   - the dispatch rule: a plan runs when it is full, when the queue stops, or when its
//     dispatch time has come (the planner's max_queue_delay_us), else the worker waits on the
//     clock (a FakeClock in tests);
//   - the queue-depth gauge, the BLAS threads of a pass (blas_policy.h), the pass hook (the test
//     seam that holds passes at a gate), and off-worker completion of big answers
//     (CompletionExecutor);
//   - the inline pass: an item whose submitting thread may run a pass (TakeCaller: the item's
//     CallerThread, caller_thread.h) runs on that thread, inside Submit, when the queue was empty,
//     an instance is idle and its plan would dispatch at once — exactly the pass a worker would
//     run next, without the hand-off to the worker and back (a lone call's floor); the thread
//     calls its CallerThread's BeforeBlocking() first (a completion queue's leader hands its
//     queue on).
//     At most `instances` passes run at once, inline or not.
// What differs between schedulers is their Planner (a policy, as OrderedStreamReactor's):
//
//   struct Planner {
//     using Item = ...;       // what Submit queues (movable)
//     using Running = ...;    // what StartLocked returns and FinishLocked takes back
//     static constexpr const char* kPass = "forward pass";      // in the drop messages
//     static constexpr const char* kItems = "requests";         // in the queue-full message
//     Clock::time_point Deadline(const Item&) const;
//     static CallerThread TakeCaller(Item&);  // the submitting thread, moved out of the item
//     bool Cancelled(const Item&) const;
//     PassSize Alone(const Item&) const;  // the item's pass alone, for the estimate
//     // With the queue's lock held: the next pass (oldest first), empty when nothing may run
//     // now (its items wait for a running pass: instances > 1).
//     PassPlan<Item> PlanLocked(Queue<Item>& queue, Clock::time_point now, PassContext& context);
//     Running StartLocked(const std::vector<Queued<Item>>& batch);  // with the lock held
//     void FinishLocked(const Running& running);                    // with the lock held
//     void Run(std::vector<Queued<Item>>& batch, PassContext& context);  // answers every item
//     void Refuse(Queued<Item>& item, Status status, int64_t queue_us, PassContext& context);
//   };
//
// Invariants: every submitted item is answered exactly once (Run or Refuse); an item leaves the
// queue only under the lock; at most `instances` passes run at once; Shutdown runs what is
// queued before the workers end, and returns only when no inline pass runs either.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/serving/caller_thread.h"
#include "server/serving/clock.h"
#include "server/serving/scheduling/batcher_options.h"
#include "server/serving/scheduling/blas_policy.h"
#include "server/serving/scheduling/completion_executor.h"
#include "server/serving/scheduling/pass_time_estimator.h"
#include "server/serving/scheduling/runner.h"

namespace mha::serve {

class StatsAggregator;

template <typename Item>
struct Queued {
  Item item;
  Clock::time_point arrival;  // Submit time on the queue's clock: delays and waits count from it
};
template <typename Item>
using Queue = std::list<Queued<Item>>;

template <typename Item>
struct PassPlan {
  std::vector<typename Queue<Item>::iterator> items;         // oldest first
  bool full = false;                                         // nothing more could join: go now
  Clock::time_point dispatch_at = Clock::time_point::min();  // go anyway from then on
};

// A pass for the pass-time estimate: session steps or not, and its padded tokens.
struct PassSize {
  bool session = false;
  int64_t padded_tokens = 0;
};

// What a planner's passes share with the queue: the clock, the pass hook, the estimator, the
// completions and the metrics.
class PassContext {
 public:
  PassContext(const BatcherOptions& options, std::string model_name, StatsAggregator* metrics)
      : options_(options),
        model_name_(std::move(model_name)),
        metrics_(metrics),
        completions_(options.completion_threads, options.inline_completion_max_bytes) {}

  Clock::time_point Now() const { return options_.clock->Now(); }
  // `pass` through the options' pass_hook when one is set.
  Status RunPass(const std::function<Status()>& pass) const {
    return options_.pass_hook ? options_.pass_hook(pass) : pass();
  }
  double EstimatePassUs(PassSize size) const {
    if (options_.estimate_pass_us) {
      return options_.estimate_pass_us(size.session, size.padded_tokens);
    }
    return pass_times_.EstimateUs(size.session, size.padded_tokens);
  }
  void RecordPass(PassSize size, int64_t micros) {
    pass_times_.Record(size.session, size.padded_tokens, static_cast<double>(micros));
  }
  // Runs `answer` inline, or on a completion thread when `bytes` is over the inline limit.
  void Deliver(std::function<void()> answer, int64_t bytes) {
    completions_.Deliver(std::move(answer), bytes);
  }
  const BatcherOptions& options() const { return options_; }
  const std::string& model_name() const { return model_name_; }
  StatsAggregator* metrics() const { return metrics_; }
  void ShutdownCompletions() { completions_.Shutdown(); }

 private:
  const BatcherOptions options_;
  const std::string model_name_;
  StatsAggregator* const metrics_;
  PassTimeEstimator pass_times_;  // internally synchronized
  CompletionExecutor completions_;
};

// The queue-depth gauge of `metrics` (may be null); defined in work_queue.cc.
void PublishQueueDepth(StatsAggregator* metrics, size_t depth);

// Why a queued item must be dropped at `now` (the sweep), OK when it may run: its deadline, its
// cancellation, then its pass alone against its deadline. `pass` names the work ("forward pass").
Status DropBeforePass(Clock::time_point deadline, bool cancelled, Clock::time_point arrival,
                      Clock::time_point now, double alone_us, const char* pass);

template <typename Planner>
class WorkQueue {
 public:
  using Item = typename Planner::Item;
  using Entry = Queued<Item>;

  // Starts options.instances workers. `planner` is owned by the queue.
  WorkQueue(Planner planner, const BatcherOptions& options, std::string model_name,
            StatsAggregator* metrics)
      : planner_(std::move(planner)),
        context_(options, std::move(model_name), metrics),
        blas_(options.blas),
        instances_(std::max(1, options.instances)) {
    workers_.reserve(instances_);
    for (int i = 0; i < instances_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~WorkQueue() { Shutdown(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `item`, or answers it at once (Planner::Refuse): UNAVAILABLE after Shutdown,
  // RESOURCE_EXHAUSTED when max_queue_size items wait. Runs its pass here instead (the inline
  // pass, above) when the planner allows it and a worker would start it at once.
  void Submit(Item item) {
    Entry entry{std::move(item), context_.Now()};
    CallerThread caller = Planner::TakeCaller(entry.item);
    const bool may_run_here = caller.may_run_pass();
    Status refused;
    Taken here;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        refused = Unavailable("server is shutting down");
      } else if (queue_.size() >= context_.options().max_queue_size) {
        refused = QueueFull(queue_.size(), context_.model_name(), context_.options().max_queue_size,
                            Planner::kItems);
      } else {
        const bool was_empty = queue_.empty();
        queue_.push_back(std::move(entry));
        if (may_run_here && was_empty) TakeInlineLocked(&here);
        PublishQueueDepth(context_.metrics(), queue_.size());
      }
    }
    if (!refused.ok()) return planner_.Refuse(entry, std::move(refused), 0, context_);
    if (here.batch.empty()) {
      cv_.notify_all();  // a worker waiting for company re-plans; an idle one wakes up
      return;
    }
    caller.BeforeBlocking();  // a queue's leader hands its queue on first (cq_unary.h)
    RunTaken(here);
  }

  // Stops accepting, runs every queued item, joins the workers, waits for inline passes.
  // Idempotent.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& worker : workers_) {
      if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return running_ == 0; });
    }
    context_.ShutdownCompletions();  // no worker is left to hand answers over
  }

  size_t depth() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }

  const Planner& planner() const { return planner_; }

 private:
  struct Dropped {
    Entry entry;
    Status status;
  };
  // A pass taken from the queue (under the lock) to run outside it.
  struct Taken {
    std::vector<Entry> batch;
    bool lone = false;
    typename Planner::Running running{};
  };

  // With mu_ held, `queue_` holding only the item just submitted: takes its pass into `*taken`
  // when an instance is idle, the item is not to be dropped and its plan dispatches now.
  void TakeInlineLocked(Taken* taken) {
    if (running_ >= instances_) return;
    const Clock::time_point now = context_.Now();
    if (!DropReason(queue_.front(), now).ok()) return;  // a worker's sweep answers it
    PassPlan<Item> plan = planner_.PlanLocked(queue_, now, context_);
    if (plan.items.empty() || !(plan.full || now >= plan.dispatch_at)) return;
    TakeLocked(plan, &taken->batch, &taken->lone);
    taken->running = planner_.StartLocked(taken->batch);
    ++running_;
  }

  // With mu_ held: moves the plan's items into `batch` and decides its BLAS threads.
  void TakeLocked(const PassPlan<Item>& plan, std::vector<Entry>* batch, bool* lone) {
    batch->reserve(plan.items.size());
    for (auto it : plan.items) {
      batch->push_back(std::move(*it));
      queue_.erase(it);
    }
    // Alone now and in the pass before: a single request amid load (a merged pass just ran)
    // stays at one thread, so OpenBLAS's helpers do not wake to spin for ~0.1 s.
    const bool alone = batch->size() == 1 && queue_.empty();
    *lone = alone && last_pass_alone_;
    last_pass_alone_ = alone;
  }

  // Runs a taken pass (on a worker or inline), then frees its instance.
  void RunTaken(Taken& taken) {
    {
      const BlasPassPolicy::Pass pass(blas_, taken.lone);
      planner_.Run(taken.batch, context_);
    }
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      planner_.FinishLocked(taken.running);
      --running_;
      // Items that waited for this pass (or an instance) may run now, and Shutdown waits for the
      // last pass; with nothing queued an idle worker has nothing to do: it is not woken (at c=1
      // every call's pass would wake them all to find the queue empty).
      wake = !queue_.empty() || (stopping_ && running_ == 0);
    }
    if (wake) cv_.notify_all();
  }

  // Why `entry` must be dropped at `now` (DropBeforePass), OK when it may run.
  Status DropReason(const Entry& entry, Clock::time_point now) const {
    const Clock::time_point deadline = planner_.Deadline(entry.item);
    const double alone_us = deadline == Clock::time_point::max()
                                ? 0
                                : context_.EstimatePassUs(planner_.Alone(entry.item));
    return DropBeforePass(deadline, planner_.Cancelled(entry.item), entry.arrival, now, alone_us,
                          Planner::kPass);
  }

  // With mu_ held: moves expired, cancelled and hopeless items to `dropped`.
  void SweepLocked(Clock::time_point now, std::vector<Dropped>* dropped) {
    for (auto it = queue_.begin(); it != queue_.end();) {
      Status status = DropReason(*it, now);
      if (status.ok()) {
        ++it;
        continue;
      }
      dropped->push_back(Dropped{std::move(*it), std::move(status)});
      it = queue_.erase(it);
    }
  }

  // With the lock held: waits until a pass may run (moved into `batch`), items were dropped, or
  // the queue stopped empty (`*exit`). `*lone`: one item in the pass and nothing else queued, as
  // in the pass planned before it (blas_policy.h).
  void NextLocked(std::unique_lock<std::mutex>& lock, std::vector<Dropped>* dropped,
                  std::vector<Entry>* batch, bool* lone, bool* exit) {
    for (;;) {
      SweepLocked(context_.Now(), dropped);
      if (!dropped->empty()) {
        PublishQueueDepth(context_.metrics(), queue_.size());
        return;  // answer them first (outside the lock), then plan again
      }
      if (queue_.empty()) {
        if (stopping_) {
          *exit = true;
          return;
        }
        cv_.wait(lock);
        continue;
      }
      if (running_ >= instances_) {  // an inline pass holds the instance this worker would use
        cv_.wait(lock);
        continue;
      }
      PassPlan<Item> plan = planner_.PlanLocked(queue_, context_.Now(), context_);
      if (plan.items.empty()) {  // every item waits for a running pass
        cv_.wait(lock);
        continue;
      }
      if (plan.full || stopping_ || context_.Now() >= plan.dispatch_at) {
        TakeLocked(plan, batch, lone);
        PublishQueueDepth(context_.metrics(), queue_.size());
        return;
      }
      // A FakeClock moves only when told: then the wait ends every tick to look again (clock.h).
      cv_.wait_until(lock, context_.options().clock->WakeAt(plan.dispatch_at));
    }
  }

  void WorkerLoop() {
    for (;;) {
      std::vector<Dropped> dropped;
      Taken taken;
      bool exit = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        NextLocked(lock, &dropped, &taken.batch, &taken.lone, &exit);
        if (!taken.batch.empty()) {
          taken.running = planner_.StartLocked(taken.batch);
          ++running_;
        }
      }
      for (Dropped& d : dropped) {
        const int64_t waited = MicrosBetween(d.entry.arrival, context_.Now());
        planner_.Refuse(d.entry, std::move(d.status), waited, context_);
      }
      if (!taken.batch.empty()) RunTaken(taken);
      if (exit) {
        cv_.notify_all();  // the other workers may exit too
        return;
      }
    }
  }

  Planner planner_;
  PassContext context_;
  const BlasPassPolicy blas_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Queue<Item> queue_;
  bool stopping_ = false;
  const int instances_;
  int running_ = 0;  // passes running now (workers' and inline), at most instances_
  // The last pass planned held one item and left the queue empty (blas_policy.h's "lone" needs
  // two such passes in a row).
  bool last_pass_alone_ = true;
  std::vector<std::thread> workers_;
};

}  // namespace mha::serve
