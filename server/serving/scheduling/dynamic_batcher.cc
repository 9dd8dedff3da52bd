#include "server/serving/scheduling/dynamic_batcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <exception>
#include <utility>

#include "server/serving/budget.h"
#include "server/serving/observability/metrics.h"
#include "server/serving/safely.h"

namespace mha::serve {
namespace {

// Tokens of one pass over `shapes` as PlanLocked counts them: every request padded to T_max
// (plus S_max for cross-attention).
int64_t PaddedTokens(const std::vector<RequestShape>& shapes, bool cross) {
  int64_t rows = 0, t_max = 0, s_max = 0;
  for (const RequestShape& s : shapes) {
    rows += s.rows;
    t_max = std::max(t_max, s.t);
    s_max = std::max(s_max, s.s);
  }
  return rows * (t_max + (cross ? s_max : 0));
}
int64_t PaddedTokens(const RequestShape& s, bool cross) {
  return s.rows * (s.t + (cross ? s.s : 0));
}

}  // namespace

double DynamicBatcher::EstimatePassUs(bool session, int64_t padded_tokens) const {
  if (options_.estimate_pass_us) return options_.estimate_pass_us(session, padded_tokens);
  return pass_times_.EstimateUs(session, padded_tokens);
}

Status DynamicBatcher::RunPass(const std::function<Status()>& pass) const {
  return options_.pass_hook ? options_.pass_hook(pass) : pass();
}

void DynamicBatcher::RecordPass(bool session, int64_t padded_tokens, int64_t micros) const {
  pass_times_.Record(session, padded_tokens, static_cast<double>(micros));
}

DynamicBatcher::DynamicBatcher(std::string model_name, BatchModelInfo info,
                               std::unique_ptr<PassRunner> passes, BatcherOptions options,
                               StatsAggregator* metrics)
    : model_name_(std::move(model_name)),
      info_(info),
      passes_(std::move(passes)),
      options_(std::move(options)),
      metrics_(metrics),
      blas_(options_.blas),
      completions_(options_.completion_threads, options_.inline_completion_max_bytes) {
  const int n = std::max(1, options_.instances);
  workers_.reserve(n);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

DynamicBatcher::DynamicBatcher(std::string model_name, BatchModelInfo info, BatchForwardFn forward,
                               BatcherOptions options, StatsAggregator* metrics)
    : DynamicBatcher(std::move(model_name), info, MakePassRunner(info, std::move(forward)),
                     std::move(options), metrics) {}

std::unique_ptr<DynamicBatcher> DynamicBatcher::ForModel(std::shared_ptr<const MhaModel> model,
                                                         std::string model_name,
                                                         BatcherOptions options,
                                                         StatsAggregator* metrics) {
  const BatchModelInfo info = MakeBatchModelInfo(DescribeModel(*model));
  return std::make_unique<DynamicBatcher>(std::move(model_name), info,
                                          MakeModelPassRunner(std::move(model)), std::move(options),
                                          metrics);
}

DynamicBatcher::~DynamicBatcher() { Shutdown(); }

void DynamicBatcher::Submit(InferenceTask task, DoneCallback done) {
  // The task was validated by ServerCore (rank-3 query, key/value pair, masks): no check here.
  assert(task.inputs.query.defined() && task.inputs.query.dim() == 3);
  const GroupKey key =
      task.step ? MakeStepGroupKey(task.inputs.query, task.step->cross) : MakeGroupKey(task.inputs);
  const RequestShape shape = ShapeOf(task.inputs);
  Entry entry{std::move(task), std::move(done), key, shape, Now()};
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      refused = Unavailable("server is shutting down");
    } else if (queue_.size() >= options_.max_queue_size) {
      refused = QueueFull(queue_.size(), model_name_, options_.max_queue_size);
    } else {
      queue_.push_back(std::move(entry));
      PublishDepthLocked();
    }
  }
  if (!refused.ok()) {
    Refuse(entry.task, entry.done, std::move(refused));
    return;
  }
  cv_.notify_all();  // a worker waiting for company re-plans; an idle one wakes up
}

void DynamicBatcher::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& worker : workers_) {
    if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
  }
  completions_.Shutdown();  // no worker is left to hand completions over
}

size_t DynamicBatcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void DynamicBatcher::PublishDepthLocked() const {
  if (metrics_) metrics_->SetQueueDepth(static_cast<int64_t>(queue_.size()));
}

void DynamicBatcher::SweepLocked(Clock::time_point now, std::vector<Dropped>* dropped) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    Status status = DropBeforeCompute(it->task, it->arrival, now);
    if (status.ok() && it->task.deadline != Clock::time_point::max()) {
      // Its pass alone would end after its deadline: nobody would read the answer.
      const double alone_us =
          EstimatePassUs(it->key.session != 0, PaddedTokens(it->shape, it->key.cross));
      const double left_us =
          std::chrono::duration<double, std::micro>(it->task.deadline - now).count();
      if (alone_us > 0 && alone_us > left_us) {
        status = DeadlineExceeded(
            "dropped before the forward pass: the deadline would pass during it (estimated " +
            std::to_string(static_cast<int64_t>(alone_us)) + " us, " +
            std::to_string(static_cast<int64_t>(left_us)) + " us left after " +
            std::to_string(MicrosBetween(it->arrival, now)) + " us in the queue)");
      }
    }
    if (status.ok()) {
      ++it;
      continue;
    }
    dropped->push_back(Dropped{std::move(*it), std::move(status)});
    it = queue_.erase(it);
  }
}

std::vector<DynamicBatcher::Queue::iterator> DynamicBatcher::PlanLocked(
    Clock::time_point now, bool* full, Clock::time_point* dispatch_at) {
  std::vector<Queue::iterator> plan;
  const auto oldest = queue_.begin();
  if (!options_.batching) {  // one request per pass, at once
    plan.push_back(oldest);
    *full = true;
    *dispatch_at = Clock::time_point::min();
    return plan;
  }
  const GroupKey& key = oldest->key;
  *full = false;
  const Clock::time_point waited_enough =
      oldest->arrival + std::chrono::microseconds(options_.max_queue_delay_us);
  bool urgent = false;  // a deadline would pass while waiting for company: go now
  int64_t rows = 0, t_max = 0, s_max = 0;
  Clock::time_point earliest_deadline = Clock::time_point::max();  // of the tasks in the plan
  for (auto it = oldest; it != queue_.end(); ++it) {
    if (it->key != key) continue;
    const RequestShape& s = it->shape;
    const int64_t next_rows = rows + s.rows;
    const int64_t next_t = std::max(t_max, s.t), next_s = std::max(s_max, s.s);
    const int64_t padded = next_rows * (next_t + (key.cross ? next_s : 0));
    const int64_t work =
        key.session != 0
            ? 0
            : PassWorkBytes(info_.embed_dim, info_.num_heads, info_.extra_keys,
                            static_cast<int64_t>(ElementSize(ToElementType(info_.mask_dtype))),
                            next_rows, next_t, key.cross ? next_s : next_t, key.need_weights);
    if (!plan.empty() &&
        (next_rows > options_.max_batch_rows || padded > options_.max_batch_tokens ||
         work > options_.max_batch_work_bytes)) {
      *full = true;  // keep looking: a smaller task may still fit
      continue;
    }
    const Clock::time_point earliest = std::min(earliest_deadline, it->task.deadline);
    if (!plan.empty() && earliest != Clock::time_point::max()) {
      // The pass with this task must still end before every deadline in it; else the task waits
      // for a later pass (or, when even its pass alone is too long, the sweep drops it).
      const double pass_us = EstimatePassUs(key.session != 0, padded);
      if (pass_us > 0 &&
          now + std::chrono::microseconds(static_cast<int64_t>(pass_us)) > earliest) {
        continue;
      }
    }
    earliest_deadline = earliest;
    plan.push_back(it);
    rows = next_rows, t_max = next_t, s_max = next_s;
    urgent = urgent || it->task.deadline <= waited_enough;
    if (key.solo) {  // head options are per request: run it alone, now
      *full = true;
      break;
    }
  }
  if (rows >= options_.max_batch_rows) *full = true;
  *dispatch_at = urgent ? Clock::time_point::min() : waited_enough;
  return plan;
}

void DynamicBatcher::WorkerLoop() {
  for (;;) {
    std::vector<Dropped> dropped;
    std::vector<Entry> batch;
    bool exit = false;
    bool lone = false;  // one request in the pass and nothing else queued (blas_policy.h)
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        SweepLocked(Now(), &dropped);
        if (!dropped.empty()) {
          PublishDepthLocked();
          break;  // answer them first (outside the lock), then plan again
        }
        if (queue_.empty()) {
          if (stopping_) {
            exit = true;
            break;
          }
          cv_.wait(lock);
          continue;
        }
        bool full = false;
        Clock::time_point dispatch_at;
        std::vector<Queue::iterator> plan = PlanLocked(Now(), &full, &dispatch_at);
        if (full || stopping_ || Now() >= dispatch_at) {
          batch.reserve(plan.size());
          for (auto it : plan) {
            batch.push_back(std::move(*it));
            queue_.erase(it);
          }
          // Alone now and in the pass before: a single request amid load (a merged pass just
          // ran) stays at one thread, so OpenBLAS's helpers do not wake to spin for ~0.1 s.
          const bool alone = batch.size() == 1 && queue_.empty();
          lone = alone && last_pass_alone_;
          last_pass_alone_ = alone;
          PublishDepthLocked();
          break;
        }
        // A FakeClock moves only when told: then the wait ends every tick to look again (clock.h).
        cv_.wait_until(lock, options_.clock->WakeAt(dispatch_at));
      }
    }
    for (Dropped& d : dropped) {
      InferenceResult result;
      result.status = std::move(d.status);
      result.queue_us = MicrosBetween(d.entry.arrival, Now());
      Answer(d.entry, std::move(result));
    }
    if (!batch.empty()) {
      const BlasPassPolicy::Pass pass(blas_, lone);
      RunBatch(batch);
    }
    if (exit) return;
  }
}

InferenceResult DynamicBatcher::RunAlone(Entry& entry) const {
  InferenceResult result;
  const auto start = Now();
  result.queue_us = MicrosBetween(entry.arrival, start);
  result.status = RunPass([&] {
    return Safely("forward pass", [&] { return passes_->RunOne(entry.task, &result.outputs); });
  });
  result.compute_us = MicrosBetween(start, Now());
  if (result.status.ok()) {
    RecordPass(entry.key.session != 0, PaddedTokens(entry.shape, entry.key.cross),
               result.compute_us);
  }
  if (!result.status.ok()) {
    result.outputs = HostOutputs();
  } else if (metrics_) {
    const TokenCount tokens = CountTokens({entry.shape}, entry.key.cross);
    metrics_->RecordBatch(1, entry.shape.rows, tokens.real, tokens.padded);
  }
  return result;
}

void DynamicBatcher::RunBatch(std::vector<Entry>& batch) {
  if (batch.size() == 1) {
    Answer(batch.front(), RunAlone(batch.front()));
    return;
  }
  if (batch.front().task.step) {
    RunStepBatch(batch);
    return;
  }
  const auto start = Now();
  std::vector<const InferenceTask*> tasks;
  std::vector<RequestShape> shapes;
  for (const Entry& e : batch) {
    tasks.push_back(&e.task);
    shapes.push_back(e.shape);
  }
  std::vector<HostOutputs> outputs;
  PassTimes times;
  const Status status = RunPass([&] {
    return Safely("forward pass",
                  [&] { return passes_->RunMerged(tasks, &outputs, *options_.clock, &times); });
  });
  const int64_t compute_us = MicrosBetween(start, Now());
  if (!status.ok() || outputs.size() != batch.size()) {
    // One request's problem must not fail the others: each runs alone and answers for itself.
    spdlog::warn("model {}: batched forward pass of {} requests failed ({}); retrying each alone",
                 model_name_, batch.size(), status.ToString());
    for (Entry& e : batch) Answer(e, RunAlone(e));
    return;
  }
  RecordPass(false, PaddedTokens(shapes, batch.front().key.cross), compute_us);
  if (metrics_) {
    int64_t rows = 0;
    for (const RequestShape& s : shapes) rows += s.rows;
    const TokenCount tokens = CountTokens(shapes, batch.front().key.cross);
    metrics_->RecordBatch(static_cast<int64_t>(batch.size()), rows, tokens.real, tokens.padded);
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    InferenceResult result;
    result.status = Status::Ok();
    result.outputs = std::move(outputs[i]);
    result.queue_us = MicrosBetween(batch[i].arrival, start);
    result.compute_us = compute_us;
    result.merge_us = times.merge_us;
    result.split_us = times.split_us;
    Answer(batch[i], std::move(result));
  }
}

void DynamicBatcher::RunStepBatch(std::vector<Entry>& batch) {
  const auto start = Now();
  std::vector<const InferenceTask*> tasks;
  std::vector<HostOutputs> outputs;
  int64_t rows = 0, tokens = 0;
  for (const Entry& e : batch) {
    tasks.push_back(&e.task);
    rows += e.shape.rows;
    tokens += e.shape.rows * e.shape.t;
  }
  // On failure every cache is back at its length (PassRunner::RunSteps): each step can run alone.
  const Status status = RunPass(
      [&] { return Safely("forward pass", [&] { return passes_->RunSteps(tasks, &outputs); }); });
  const int64_t compute_us = MicrosBetween(start, Now());
  if (!status.ok()) {
    spdlog::warn("model {}: merged pass of {} session steps failed ({}); retrying each alone",
                 model_name_, batch.size(), status.ToString());
    for (Entry& e : batch) Answer(e, RunAlone(e));
    return;
  }
  std::vector<RequestShape> shapes;
  for (const Entry& e : batch) shapes.push_back(e.shape);
  RecordPass(true, PaddedTokens(shapes, batch.front().key.cross), compute_us);
  if (metrics_) metrics_->RecordBatch(static_cast<int64_t>(batch.size()), rows, tokens, tokens);
  for (size_t i = 0; i < batch.size(); ++i) {
    InferenceResult result;
    result.outputs = std::move(outputs[i]);
    result.queue_us = MicrosBetween(batch[i].arrival, start);
    result.compute_us = compute_us;
    Answer(batch[i], std::move(result));
  }
}

void DynamicBatcher::Answer(Entry& entry, InferenceResult result) {
  entry.task = InferenceTask();  // free the inputs (they may borrow the request) before answering
  result.answered_at = Clock::now();  // the real clock: Complete compares it with its own
  completions_.Complete(std::move(entry.done), std::move(result));
}

}  // namespace mha::serve
