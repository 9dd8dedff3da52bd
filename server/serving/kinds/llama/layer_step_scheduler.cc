#include "server/serving/kinds/llama/layer_step_scheduler.h"

#include <spdlog/spdlog.h>

#include <set>
#include <utility>

#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/safely.h"

namespace mha::serve {

std::unique_ptr<LayerStepScheduler> LayerStepScheduler::Create(
    const BatcherOptions& options, std::shared_ptr<const LlamaAttentionStack> stack,
    LlamaSessionStore* sessions, std::string model_name, StatsAggregator* metrics) {
  return std::unique_ptr<LayerStepScheduler>(
      new LayerStepScheduler(options, std::move(stack), sessions, std::move(model_name), metrics));
}

void LayerStepScheduler::Submit(LayerStepTask task) {
  task.tokens = 0;
  for (const HostTensor& h : task.hidden) task.tokens += h.size(0);
  queue_.Submit(std::move(task));
}

PassPlan<LayerStepTask> LayerPlanner::PlanLocked(Queue<Item>& queue, Clock::time_point now,
                                                 const PassContext& context) const {
  const BatcherOptions& o = context.options();
  PassPlan<Item> plan;
  std::set<const LlamaSession*> earlier;  // sessions of every message looked at so far
  int64_t layer = -1, tokens = 0;
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    bool runnable = layer < 0 || it->item.layer == layer;
    for (const LlamaSessionRef& s : it->item.sessions) {
      runnable = runnable && earlier.count(s.get()) == 0 && in_flight_.count(s.get()) == 0;
    }
    for (const LlamaSessionRef& s : it->item.sessions) earlier.insert(s.get());
    if (!runnable) continue;
    if (!plan.items.empty() && tokens + it->item.tokens > o.max_batch_tokens) {
      plan.full = true;  // keep looking: a smaller message may still fit
      continue;
    }
    if (layer < 0) layer = it->item.layer;
    plan.items.push_back(it);
    tokens += it->item.tokens;
  }
  if (tokens >= o.max_batch_tokens) plan.full = true;
  plan.dispatch_at = queue.front().arrival + std::chrono::microseconds(o.max_queue_delay_us);
  return plan;
}

LayerPlanner::Running LayerPlanner::StartLocked(const std::vector<Queued<Item>>& batch) {
  Running running;
  for (const auto& q : batch) {
    for (const LlamaSessionRef& s : q.item.sessions) running.push_back(s.get());
  }
  in_flight_.insert(running.begin(), running.end());
  return running;
}

void LayerPlanner::FinishLocked(const Running& running) {
  for (const LlamaSession* s : running) in_flight_.erase(in_flight_.find(s));
}

std::vector<Queued<LayerStepTask>*> LayerPlanner::Prepare(std::vector<Queued<Item>>& batch,
                                                          Clock::time_point start,
                                                          PassContext& context) const {
  std::vector<Queued<Item>*> ready;
  for (auto& q : batch) {
    Status prepared;
    for (size_t i = 0; prepared.ok() && i < q.item.sessions.size(); ++i) {
      prepared = sessions_->Prepare(q.item.sessions[i], q.item.layer, q.item.hidden[i].size(0));
      if (!prepared.ok()) {
        prepared =
            Status(prepared.code(), "entries[" + std::to_string(i) + "]: " + prepared.message());
      }
    }
    if (prepared.ok()) {
      ready.push_back(&q);
    } else {
      Refuse(q, std::move(prepared), MicrosBetween(q.arrival, start), context);
    }
  }
  return ready;
}

void LayerPlanner::Run(std::vector<Queued<Item>>& batch, PassContext& context) const {
  const Clock::time_point start = context.Now();
  std::vector<Queued<Item>*> ready = Prepare(batch, start, context);
  if (ready.empty()) return;
  auto step = [&](std::vector<Queued<Item>*>& messages, std::vector<LayerStepResponse>* answers) {
    return context.RunPass(
        [&] { return Safely("layer step", [&] { return Step(messages, answers, context); }); });
  };
  std::vector<LayerStepResponse> answers;
  const Status status = step(ready, &answers);
  if (status.ok()) {
    for (size_t i = 0; i < ready.size(); ++i) Answer(*ready[i], std::move(answers[i]), context);
    return;
  }
  if (ready.size() > 1) {
    spdlog::warn("model {}: merged layer step of {} messages failed ({}); retrying each alone",
                 context.model_name(), ready.size(), status.ToString());
  }
  for (Queued<Item>* q : ready) {
    std::vector<Queued<Item>*> one{q};
    std::vector<LayerStepResponse> alone;
    const Status s = ready.size() > 1 ? step(one, &alone) : status;
    if (s.ok()) {
      Answer(*q, std::move(alone[0]), context);
    } else {
      Refuse(*q, s, MicrosBetween(q->arrival, start), context);
    }
  }
}

Status LayerPlanner::Step(std::vector<Queued<Item>*>& batch,
                          std::vector<LayerStepResponse>* answers, PassContext& context) const {
  const Clock::time_point start = context.Now();
  const int64_t layer = batch.front()->item.layer;
  std::vector<LlamaHostEntry> entries;
  int64_t tokens = 0;
  for (Queued<Item>* q : batch) {
    for (size_t i = 0; i < q->item.sessions.size(); ++i) {
      entries.push_back({q->item.sessions[i]->cache.get(), q->item.hidden[i], q->item.output});
    }
    tokens += q->item.tokens;
  }
  auto outputs = StepLlamaSessions(*stack_, layer, entries);
  if (!outputs.ok()) return outputs.status();
  const int64_t compute_us = MicrosBetween(start, context.Now());
  context.RecordPass(PassSize{true, tokens}, compute_us);
  if (context.metrics()) {
    context.metrics()->RecordBatch(static_cast<int64_t>(batch.size()),
                                   static_cast<int64_t>(entries.size()), tokens, tokens);
  }
  answers->clear();
  size_t next = 0;
  for (Queued<Item>* q : batch) {
    LayerStepResponse r;
    for (const LlamaSessionRef& s : q->item.sessions) {
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

void LayerPlanner::Refuse(Queued<Item>& item, Status status, int64_t queue_us,
                          PassContext& context) const {
  LayerStepResponse response;
  response.status = std::move(status);
  response.queue_us = queue_us;
  Answer(item, std::move(response), context);
}

void LayerPlanner::Answer(Queued<Item>& queued, LayerStepResponse response,
                          PassContext& context) const {
  LayerStepDone done = std::move(queued.item.done);
  sessions_->Finish(queued.item.sessions);
  queued.item = LayerStepTask();  // drop the inputs (they may borrow the message) first
  int64_t bytes = 0;
  for (const HostTensor& t : response.outputs) bytes += static_cast<int64_t>(t.bytes());
  context.Deliver([done = std::move(done),
                   response = std::move(response)]() mutable { done(std::move(response)); },
                  bytes);
}

}  // namespace mha::serve
