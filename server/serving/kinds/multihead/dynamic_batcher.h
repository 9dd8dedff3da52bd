// DynamicBatcher: the ModelRunner of forwards and one-layer session steps (Triton's dynamic
// batcher): the shared queue/worker core (work_queue.h: queue limit, instances, deadline and
// cancel drops, drops on the pass-time estimate, the queue-depth gauge, off-worker completion)
// with the group-key merge planner (forward_planner.h). Batching off (BatcherOptions::batching =
// false, mha-server --batching off) is the same scheduler with one request per pass: the same
// queue, drops, errors, metrics and completions. Session steps (InferenceTask::step) merge with
// steps of other sessions into one DecodeSteps pass; decode steps (T = 1) and prefill chunks
// (T > 1) form separate groups, so a long prefill never holds decode steps in its pass
// (docs/sessions.md). Tasks come validated (ServerCore::Infer): the batcher trusts them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "server/serving/kinds/multihead/batch_assembly.h"
#include "server/serving/kinds/multihead/forward_planner.h"
#include "server/serving/kinds/multihead/merge/pass_runner.h"
#include "server/serving/scheduling/batcher_options.h"
#include "server/serving/scheduling/runner.h"
#include "server/serving/scheduling/work_queue.h"

namespace mha::serve {

class StatsAggregator;

class DynamicBatcher final : public ModelRunner {
 public:
  // `metrics` may be null; `model_name` labels the metrics and logs. `passes` runs the passes
  // (merge/pass_runner.h: a real model's, or a test's fake forward).
  // `max_work_bytes` bounds a merged pass's estimate (--max-work-bytes).
  DynamicBatcher(std::string model_name, BatchModelInfo info, std::unique_ptr<PassRunner> passes,
                 BatcherOptions options, StatsAggregator* metrics = nullptr,
                 int64_t max_work_bytes = kDefaultMaxWorkBytes);
  // The same over a forward function (MakePassRunner(info, forward)): tests' fakes.
  DynamicBatcher(std::string model_name, BatchModelInfo info, BatchForwardFn forward,
                 BatcherOptions options, StatsAggregator* metrics = nullptr,
                 int64_t max_work_bytes = kDefaultMaxWorkBytes);
  // The batcher of a real model: MakeModelPassRunner and its BatchModelInfo.
  static std::unique_ptr<DynamicBatcher> ForModel(std::shared_ptr<const MhaModel> model,
                                                  std::string model_name, BatcherOptions options,
                                                  StatsAggregator* metrics = nullptr,
                                                  int64_t max_work_bytes = kDefaultMaxWorkBytes);
  ~DynamicBatcher() override;

  void Submit(InferenceTask task, DoneCallback done) override;
  void Shutdown() override;
  size_t queue_depth() const override;

  const BatcherOptions& options() const { return options_; }

 private:
  const BatcherOptions options_;
  WorkQueue<ForwardPlanner> queue_;
};

}  // namespace mha::serve
