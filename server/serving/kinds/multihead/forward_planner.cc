#include "server/serving/kinds/multihead/forward_planner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <utility>

#include "server/serving/kinds/multihead/pass_cost.h"
#include "server/serving/kinds/multihead/session_step.h"
#include "server/serving/observability/stats_aggregator.h"
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

// A merged pass's working memory (budget.h); its padding makes a mask (whole on a device).
int64_t MergedWorkBytes(const BatchModelInfo& info, int64_t rows, int64_t t, int64_t s,
                        bool need_weights) {
  PassShape pass;
  pass.embed_dim = info.embed_dim, pass.num_heads = info.num_heads;
  pass.extra_keys = info.extra_keys;
  pass.compute_bytes = static_cast<int64_t>(ElementSize(ToElementType(info.mask_dtype)));
  pass.rows = rows, pass.t = t, pass.s = s;
  pass.on_device = info.on_device, pass.block_bytes = info.block_bytes;
  pass.head_options = need_weights;
  pass.need_weights = need_weights;
  pass.mask_heads = 1;
  return PassWorkBytes(pass);
}

std::vector<RequestShape> ShapesOf(const std::vector<Queued<ForwardItem>>& batch) {
  std::vector<RequestShape> shapes;
  shapes.reserve(batch.size());
  for (const auto& e : batch) shapes.push_back(e.item.shape);
  return shapes;
}

}  // namespace

ForwardItem ForwardPlanner::Make(InferenceTask task, DoneCallback done) {
  // The task was validated by ServerCore (rank-3 query, key/value pair, masks): no check here.
  assert(task.inputs.query.defined() && task.inputs.query.dim() == 3);
  const GroupKey key =
      task.step ? MakeStepGroupKey(task.inputs.query, task.step->cross) : MakeGroupKey(task.inputs);
  const RequestShape shape = ShapeOf(task.inputs);
  return ForwardItem{std::move(task), std::move(done), key, shape};
}

PassSize ForwardPlanner::Alone(const Item& item) const {
  return PassSize{item.key.session != 0, PaddedTokens({item.shape}, item.key.cross)};
}

PassPlan<ForwardItem> ForwardPlanner::PlanLocked(Queue<Item>& queue, Clock::time_point now,
                                                 const PassContext& context) const {
  const BatcherOptions& o = context.options();
  PassPlan<Item> plan;
  const auto oldest = queue.begin();
  if (!o.batching) {  // one request per pass, at once
    plan.items.push_back(oldest);
    plan.full = true;
    return plan;
  }
  const GroupKey& key = oldest->item.key;
  const Clock::time_point waited_enough =
      oldest->arrival + std::chrono::microseconds(o.max_queue_delay_us);
  bool urgent = false;  // a deadline would pass while waiting for company: go now
  int64_t rows = 0, t_max = 0, s_max = 0;
  Clock::time_point earliest_deadline = Clock::time_point::max();  // of the tasks in the plan
  for (auto it = oldest; it != queue.end(); ++it) {
    if (it->item.key != key) continue;
    const RequestShape& s = it->item.shape;
    const int64_t next_rows = rows + s.rows;
    const int64_t next_t = std::max(t_max, s.t), next_s = std::max(s_max, s.s);
    const int64_t padded = next_rows * (next_t + (key.cross ? next_s : 0));
    const int64_t work = key.session != 0
                             ? 0
                             : MergedWorkBytes(info_, next_rows, next_t,
                                               key.cross ? next_s : next_t, key.need_weights);
    if (!plan.items.empty() &&
        (next_rows > o.max_batch_rows || padded > o.max_batch_tokens || work > max_work_bytes_)) {
      plan.full = true;  // keep looking: a smaller task may still fit
      continue;
    }
    const Clock::time_point earliest = std::min(earliest_deadline, it->item.task.deadline);
    if (!plan.items.empty() && earliest != Clock::time_point::max()) {
      // The pass with this task must still end before every deadline in it; else the task waits
      // for a later pass (or, when even its pass alone is too long, the sweep drops it).
      const double pass_us = context.EstimatePassUs(PassSize{key.session != 0, padded});
      if (pass_us > 0 &&
          now + std::chrono::microseconds(static_cast<int64_t>(pass_us)) > earliest) {
        continue;
      }
    }
    earliest_deadline = earliest;
    plan.items.push_back(it);
    rows = next_rows, t_max = next_t, s_max = next_s;
    urgent = urgent || it->item.task.deadline <= waited_enough;
    if (key.solo) {  // head options are per request: run it alone, now
      plan.full = true;
      break;
    }
  }
  if (rows >= o.max_batch_rows) plan.full = true;
  plan.dispatch_at = urgent ? Clock::time_point::min() : waited_enough;
  return plan;
}

void ForwardPlanner::Run(std::vector<Queued<Item>>& batch, PassContext& context) const {
  if (batch.size() == 1) {
    Answer(batch.front(), RunAlone(batch.front(), context), context);
  } else if (batch.front().item.task.step) {
    RunSteps(batch, context);
  } else {
    RunMerged(batch, context);
  }
}

void ForwardPlanner::Refuse(Queued<Item>& item, Status status, int64_t queue_us,
                            PassContext& context) const {
  InferenceResult result;
  result.status = std::move(status);
  result.queue_us = queue_us;
  Answer(item, std::move(result), context);
}

InferenceResult ForwardPlanner::RunAlone(Queued<Item>& entry, PassContext& context) const {
  InferenceResult result;
  const auto start = context.Now();
  result.queue_us = MicrosBetween(entry.arrival, start);
  result.status = context.RunPass([&] {
    return Safely("forward pass",
                  [&] { return passes_->RunOne(entry.item.task, &result.outputs); });
  });
  result.compute_us = MicrosBetween(start, context.Now());
  if (!result.status.ok()) {
    result.outputs = HostOutputs();
    return result;
  }
  context.RecordPass(Alone(entry.item), result.compute_us);
  if (context.metrics()) {
    const TokenCount tokens = CountTokens({entry.item.shape}, entry.item.key.cross);
    context.metrics()->RecordBatch(1, entry.item.shape.rows, tokens.real, tokens.padded);
  }
  return result;
}

void ForwardPlanner::RunMerged(std::vector<Queued<Item>>& batch, PassContext& context) const {
  const auto start = context.Now();
  std::vector<const InferenceTask*> tasks;
  for (const auto& e : batch) tasks.push_back(&e.item.task);
  const std::vector<RequestShape> shapes = ShapesOf(batch);
  std::vector<HostOutputs> outputs;
  PassTimes times;
  const Status status = context.RunPass([&] {
    return Safely("forward pass", [&] {
      return passes_->RunMerged(tasks, &outputs, *context.options().clock, &times);
    });
  });
  const int64_t compute_us = MicrosBetween(start, context.Now());
  if (!status.ok() || outputs.size() != batch.size()) {
    // One request's problem must not fail the others: each runs alone and answers for itself.
    spdlog::warn("model {}: batched forward pass of {} requests failed ({}); retrying each alone",
                 context.model_name(), batch.size(), status.ToString());
    for (auto& e : batch) Answer(e, RunAlone(e, context), context);
    return;
  }
  const bool cross = batch.front().item.key.cross;
  context.RecordPass(PassSize{false, PaddedTokens(shapes, cross)}, compute_us);
  if (context.metrics()) {
    int64_t rows = 0;
    for (const RequestShape& s : shapes) rows += s.rows;
    const TokenCount tokens = CountTokens(shapes, cross);
    context.metrics()->RecordBatch(static_cast<int64_t>(batch.size()), rows, tokens.real,
                                   tokens.padded);
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    InferenceResult result;
    result.status = Status::Ok();
    result.outputs = std::move(outputs[i]);
    result.queue_us = MicrosBetween(batch[i].arrival, start);
    result.compute_us = compute_us;
    result.merge_us = times.merge_us;
    result.split_us = times.split_us;
    Answer(batch[i], std::move(result), context);
  }
}

void ForwardPlanner::RunSteps(std::vector<Queued<Item>>& batch, PassContext& context) const {
  const auto start = context.Now();
  std::vector<const InferenceTask*> tasks;
  std::vector<HostOutputs> outputs;
  int64_t rows = 0, tokens = 0;
  for (const auto& e : batch) {
    tasks.push_back(&e.item.task);
    rows += e.item.shape.rows;
    tokens += e.item.shape.rows * e.item.shape.t;
  }
  // On failure every cache is back at its length (PassRunner::RunSteps): each step can run alone.
  const Status status = context.RunPass(
      [&] { return Safely("forward pass", [&] { return passes_->RunSteps(tasks, &outputs); }); });
  const int64_t compute_us = MicrosBetween(start, context.Now());
  if (!status.ok()) {
    spdlog::warn("model {}: merged pass of {} session steps failed ({}); retrying each alone",
                 context.model_name(), batch.size(), status.ToString());
    for (auto& e : batch) Answer(e, RunAlone(e, context), context);
    return;
  }
  const bool cross = batch.front().item.key.cross;
  context.RecordPass(PassSize{true, PaddedTokens(ShapesOf(batch), cross)}, compute_us);
  if (context.metrics()) {
    context.metrics()->RecordBatch(static_cast<int64_t>(batch.size()), rows, tokens, tokens);
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    InferenceResult result;
    result.outputs = std::move(outputs[i]);
    result.queue_us = MicrosBetween(batch[i].arrival, start);
    result.compute_us = compute_us;
    Answer(batch[i], std::move(result), context);
  }
}

void ForwardPlanner::Answer(Queued<Item>& entry, InferenceResult result, PassContext& context) {
  entry.item.task = InferenceTask();  // free the inputs (they may borrow the request) first
  result.answered_at = Clock::now();  // the real clock: Complete compares it with its own
  const auto bytes = static_cast<int64_t>(result.outputs.output.bytes());
  context.Deliver([done = std::move(entry.item.done),
                   result = std::move(result)]() mutable { done(std::move(result)); },
                  bytes);
}

}  // namespace mha::serve
