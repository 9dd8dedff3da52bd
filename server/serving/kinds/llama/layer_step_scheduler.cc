#include "server/serving/kinds/llama/layer_step_scheduler.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/safely.h"

namespace mha::serve {

std::unique_ptr<LayerStepScheduler> LayerStepScheduler::Create(
    const BatcherOptions& options, std::shared_ptr<const LlamaAttentionStack> stack,
    LlamaSessions* sessions, std::string model_name, StatsAggregator* metrics) {
  return std::unique_ptr<LayerStepScheduler>(
      new LayerStepScheduler(options, std::move(stack), sessions, std::move(model_name), metrics));
}

void LayerStepScheduler::SubmitForward(InferenceTask task, DoneCallback done) {
  LayerStepTask item;
  item.tokens = task.inputs.query.size(0) * task.inputs.query.size(1);
  item.forward =
      std::make_shared<LlamaForwardWork>(LlamaForwardWork{std::move(task), std::move(done)});
  queue_.Submit(std::move(item));
}

bool LayerPlanner::Cancelled(const Item& item) const {
  const std::function<bool()>& cancelled =
      item.forward ? item.forward->task.is_cancelled : item.is_cancelled;
  return cancelled && cancelled();
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
  if (queue.front().item.forward) {  // a stateless forward runs alone, at once
    plan.items.push_back(queue.begin());
    plan.full = true;
    return plan;
  }
  if (!o.batching) {  // --batching off: one message per pass, at once
    plan.items.push_back(queue.begin());
    plan.full = true;
    return plan;
  }
  const int64_t layer = queue.front().item.layer;
  int64_t tokens = 0;
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    if (it->item.forward || it->item.layer != layer) continue;
    if (!plan.items.empty() && tokens + it->item.tokens > o.max_batch_tokens) {
      plan.full = true;  // keep looking: a smaller message may still fit
      continue;
    }
    plan.items.push_back(it);
    tokens += it->item.tokens;
  }
  if (tokens >= o.max_batch_tokens) plan.full = true;
  plan.dispatch_at = queue.front().arrival + std::chrono::microseconds(o.max_queue_delay_us);
  return plan;
}

std::vector<Queued<LayerStepTask>*> LayerPlanner::Prepare(std::vector<Queued<Item>>& batch,
                                                          Clock::time_point start,
                                                          PassContext& context) const {
  std::vector<Queued<Item>*> ready;
  for (auto& q : batch) {
    Status prepared;
    for (size_t i = 0; prepared.ok() && i < q.item.hold.sessions.size(); ++i) {
      CallerThread worker;  // a pass of layer steps runs on a worker
      prepared = sessions_->PrepareLayer(q.item.hold.sessions[i], q.item.layer,
                                         q.item.hidden[i].size(0), worker);
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
  if (batch.front().item.forward) return RunForward(batch.front(), context);
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
    for (size_t i = 0; i < q->item.hold.sessions.size(); ++i) {
      entries.push_back({q->item.hold.sessions[i]->cache.get(), q->item.hidden[i], q->item.output});
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
    for (const LlamaSessions::Ptr& s : q->item.hold.sessions) {
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
  if (item.item.forward) {
    InferenceResult result;
    result.status = std::move(status);
    result.queue_us = queue_us;
    return AnswerForward(item, std::move(result), context);
  }
  LayerStepResponse response;
  response.status = std::move(status);
  response.queue_us = queue_us;
  Answer(item, std::move(response), context);
}

void LayerPlanner::Answer(Queued<Item>& queued, LayerStepResponse response,
                          PassContext& context) const {
  LayerStepDone done = std::move(queued.item.done);
  sessions_->FinishMessage(queued.item.hold);
  queued.item = LayerStepTask();  // drop the inputs (they may borrow the message) first
  int64_t bytes = 0;
  for (const HostTensor& t : response.outputs) bytes += static_cast<int64_t>(t.bytes());
  context.Deliver([done = std::move(done),
                   response = std::move(response)]() mutable { done(std::move(response)); },
                  bytes);
}

void LayerPlanner::RunForward(Queued<Item>& queued, PassContext& context) const {
  const InferenceTask& task = queued.item.forward->task;
  InferenceResult result;
  const Clock::time_point start = context.Now();
  result.queue_us = MicrosBetween(queued.arrival, start);
  result.status = context.RunPass([&] {
    return Safely("forward pass", [&]() -> Status {
      auto output = LlamaForward(*stack_, task.layer, task.inputs.query, task.output_types.output);
      if (!output.ok()) return output.status();
      result.outputs.output = std::move(output.value());
      return Status::Ok();
    });
  });
  result.compute_us = MicrosBetween(start, context.Now());
  if (result.status.ok()) {
    context.RecordPass(Alone(queued.item), result.compute_us);
    if (context.metrics()) {
      context.metrics()->RecordBatch(1, task.inputs.query.size(0), queued.item.tokens,
                                     queued.item.tokens);
    }
  } else {
    result.outputs = HostOutputs();
  }
  AnswerForward(queued, std::move(result), context);
}

void LayerPlanner::AnswerForward(Queued<Item>& queued, InferenceResult result,
                                 PassContext& context) {
  std::shared_ptr<LlamaForwardWork> work = std::move(queued.item.forward);
  DoneCallback done = std::move(work->done);
  work->task = InferenceTask();       // free the inputs (they may borrow the request) first
  result.answered_at = Clock::now();  // the real clock: the front end compares it with its own
  const auto bytes = static_cast<int64_t>(result.outputs.output.bytes());
  context.Deliver(
      [done = std::move(done), result = std::move(result)]() mutable { done(std::move(result)); },
      bytes);
}

}  // namespace mha::serve
