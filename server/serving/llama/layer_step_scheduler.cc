#include "server/serving/llama/layer_step_scheduler.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <set>
#include <utility>

#include "server/serving/observability/metrics.h"
#include "server/serving/safely.h"

namespace mha::serve {
namespace {

int64_t TokensOf(const LayerStepTask& task) {
  int64_t tokens = 0;
  for (const HostTensor& h : task.hidden) tokens += h.size(0);
  return tokens;
}

}  // namespace

std::unique_ptr<LayerStepScheduler> LayerStepScheduler::Create(
    const LayerStepSchedulerOptions& options, std::shared_ptr<const LlamaAttentionStack> stack,
    LlamaSessionStore* sessions, std::string model_name, StatsAggregator* metrics) {
  return std::unique_ptr<LayerStepScheduler>(
      new LayerStepScheduler(options, std::move(stack), sessions, std::move(model_name), metrics));
}

LayerStepScheduler::LayerStepScheduler(const LayerStepSchedulerOptions& options,
                                       std::shared_ptr<const LlamaAttentionStack> stack,
                                       LlamaSessionStore* sessions, std::string model_name,
                                       StatsAggregator* metrics)
    : options_(options),
      stack_(std::move(stack)),
      sessions_(sessions),
      model_name_(std::move(model_name)),
      metrics_(metrics),
      blas_(options_.blas) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

LayerStepScheduler::~LayerStepScheduler() { Shutdown(); }

void LayerStepScheduler::Submit(LayerStepTask task) {
  Queued queued{std::move(task), 0, Now()};
  queued.tokens = TokensOf(queued.task);
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      refused = Unavailable("server is shutting down");
    } else if (queue_.size() >= options_.max_queue_size) {
      refused = ResourceExhausted("queue full: " + std::to_string(queue_.size()) +
                                  " layer step messages waiting for model '" + model_name_ +
                                  "' (--max-queue-size " + std::to_string(options_.max_queue_size) +
                                  "; the model's config.json max_queue_size overrides it)");
    } else {
      queue_.push_back(std::move(queued));
    }
  }
  if (refused.ok()) {
    cv_.notify_all();
    return;
  }
  LayerStepResponse response;
  response.status = std::move(refused);
  Answer(queued, std::move(response));
}

void LayerStepScheduler::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

size_t LayerStepScheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

std::vector<LayerStepScheduler::Queue::iterator> LayerStepScheduler::PlanLocked(bool* full) {
  std::vector<Queue::iterator> plan;
  std::set<const LlamaSession*> earlier;  // sessions of every message looked at so far
  const int64_t layer = queue_.front().task.layer;
  int64_t tokens = 0;
  *full = false;
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    bool runnable = it->task.layer == layer;
    for (const LlamaSessionRef& s : it->task.sessions) {
      runnable = runnable && earlier.count(s.get()) == 0;
    }
    for (const LlamaSessionRef& s : it->task.sessions) earlier.insert(s.get());
    if (!runnable) continue;
    if (!plan.empty() && tokens + it->tokens > options_.max_pass_tokens) {
      *full = true;  // keep looking: a smaller message may still fit
      continue;
    }
    plan.push_back(it);
    tokens += it->tokens;
  }
  if (tokens >= options_.max_pass_tokens) *full = true;
  return plan;
}

void LayerStepScheduler::SweepLocked(Clock::time_point now,
                                     std::vector<std::pair<Queued, Status>>* dropped) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    const std::string waited = std::to_string(MicrosBetween(it->arrival, now));
    Status status;
    if (now >= it->task.deadline) {
      status = DeadlineExceeded("deadline passed after " + waited +
                                " us in the queue, before the layer step");
    } else if (it->task.is_cancelled && it->task.is_cancelled()) {
      status =
          Cancelled("call cancelled after " + waited + " us in the queue, before the layer step");
    }
    if (status.ok()) {
      ++it;
      continue;
    }
    dropped->emplace_back(std::move(*it), std::move(status));
    it = queue_.erase(it);
  }
}

void LayerStepScheduler::WorkerLoop() {
  for (;;) {
    std::vector<std::pair<Queued, Status>> dropped;
    std::vector<Queued> batch;
    bool exit = false, lone = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        SweepLocked(Now(), &dropped);
        if (!dropped.empty()) break;  // answer them first (outside the lock), then plan again
        if (queue_.empty()) {
          if (stopping_) {
            exit = true;
            break;
          }
          cv_.wait(lock);
          continue;
        }
        bool full = false;
        std::vector<Queue::iterator> plan = PlanLocked(&full);
        const Clock::time_point dispatch_at =
            queue_.front().arrival + std::chrono::microseconds(options_.max_queue_delay_us);
        if (full || stopping_ || Now() >= dispatch_at) {
          for (auto it : plan) {
            batch.push_back(std::move(*it));
            queue_.erase(it);
          }
          lone = batch.size() == 1 && queue_.empty();
          break;
        }
        cv_.wait_until(lock, options_.clock->WakeAt(dispatch_at));
      }
    }
    for (auto& [queued, status] : dropped) {
      LayerStepResponse response;
      response.status = std::move(status);
      response.queue_us = MicrosBetween(queued.arrival, Now());
      Answer(queued, std::move(response));
    }
    if (!batch.empty()) {
      const BlasPassPolicy::Pass pass(blas_, lone);
      RunPass(batch);
    }
    if (exit) return;
  }
}

void LayerStepScheduler::RunPass(std::vector<Queued>& batch) {
  const Clock::time_point start = Now();
  std::vector<Queued*> ready;
  for (Queued& q : batch) {
    Status prepared;
    for (size_t i = 0; prepared.ok() && i < q.task.sessions.size(); ++i) {
      prepared = sessions_->Prepare(q.task.sessions[i], q.task.layer, q.task.hidden[i].size(0));
      if (!prepared.ok()) {
        prepared =
            Status(prepared.code(), "entries[" + std::to_string(i) + "]: " + prepared.message());
      }
    }
    if (prepared.ok()) {
      ready.push_back(&q);
      continue;
    }
    LayerStepResponse refused;
    refused.status = std::move(prepared);
    refused.queue_us = MicrosBetween(q.arrival, start);
    Answer(q, std::move(refused));
  }
  if (ready.empty()) return;
  auto hooked = [this](const std::function<Status()>& pass) {
    return options_.pass_hook ? options_.pass_hook(pass) : pass();
  };
  std::vector<LayerStepResponse> answers;
  const Status status =
      hooked([&] { return Safely("layer step", [&] { return Step(ready, &answers); }); });
  if (status.ok()) {
    for (size_t i = 0; i < ready.size(); ++i) Answer(*ready[i], std::move(answers[i]));
    return;
  }
  if (ready.size() > 1) {
    spdlog::warn("model {}: merged layer step of {} messages failed ({}); retrying each alone",
                 model_name_, ready.size(), status.ToString());
  }
  for (Queued* q : ready) {
    std::vector<Queued*> one{q};
    std::vector<LayerStepResponse> alone;
    const Status s =
        ready.size() > 1
            ? hooked([&] { return Safely("layer step", [&] { return Step(one, &alone); }); })
            : status;
    if (!s.ok()) {
      alone.assign(1, LayerStepResponse());
      alone[0].status = s;
      alone[0].queue_us = MicrosBetween(q->arrival, start);
    }
    Answer(*q, std::move(alone[0]));
  }
}

Status LayerStepScheduler::Step(std::vector<Queued*>& batch,
                                std::vector<LayerStepResponse>* answers) const {
  const Clock::time_point start = Now();
  const int64_t layer = batch.front()->task.layer;
  std::vector<LlamaHostEntry> entries;
  int64_t tokens = 0;
  for (Queued* q : batch) {
    for (size_t i = 0; i < q->task.sessions.size(); ++i) {
      entries.push_back({q->task.sessions[i]->cache.get(), q->task.hidden[i], q->task.output});
    }
    tokens += q->tokens;
  }
  auto outputs = StepLlamaSessions(*stack_, layer, entries);
  if (!outputs.ok()) return outputs.status();
  const int64_t compute_us = MicrosBetween(start, Now());
  if (metrics_) {
    metrics_->RecordBatch(static_cast<int64_t>(batch.size()), static_cast<int64_t>(entries.size()),
                          tokens, tokens);
  }
  answers->clear();
  size_t next = 0;
  for (Queued* q : batch) {
    LayerStepResponse r;
    for (const LlamaSessionRef& s : q->task.sessions) {
      r.outputs.push_back(std::move((*outputs)[next++]));
      r.layer_tokens.push_back(s->cache->length(layer));
    }
    r.queue_us = MicrosBetween(q->arrival, start);
    r.compute_us = compute_us;
    r.pass_messages = static_cast<int64_t>(batch.size());
    r.pass_entries = static_cast<int64_t>(entries.size());
    answers->push_back(std::move(r));
  }
  return Status::Ok();
}

void LayerStepScheduler::Answer(Queued& queued, LayerStepResponse response) const {
  LayerStepDone done = std::move(queued.task.done);
  sessions_->Finish(queued.task.sessions);
  queued.task = LayerStepTask();  // drop the inputs (they may borrow the message) first
  done(std::move(response));
}

}  // namespace mha::serve
