#include "server/serving/kinds/multihead/dynamic_batcher.h"

#include <utility>

namespace mha::serve {

DynamicBatcher::DynamicBatcher(std::string model_name, BatchModelInfo info,
                               std::unique_ptr<PassRunner> passes, BatcherOptions options,
                               StatsAggregator* metrics, int64_t max_work_bytes)
    : options_(std::move(options)),
      queue_(ForwardPlanner(info, std::move(passes), max_work_bytes), options_,
             std::move(model_name), metrics) {}

DynamicBatcher::DynamicBatcher(std::string model_name, BatchModelInfo info, BatchForwardFn forward,
                               BatcherOptions options, StatsAggregator* metrics,
                               int64_t max_work_bytes)
    : DynamicBatcher(std::move(model_name), info, MakePassRunner(info, std::move(forward)),
                     std::move(options), metrics, max_work_bytes) {}

std::unique_ptr<DynamicBatcher> DynamicBatcher::ForModel(std::shared_ptr<const MhaModel> model,
                                                         std::string model_name,
                                                         BatcherOptions options,
                                                         StatsAggregator* metrics,
                                                         int64_t max_work_bytes) {
  const BatchModelInfo info = MakeBatchModelInfo(DescribeModel(*model));
  return std::make_unique<DynamicBatcher>(std::move(model_name), info,
                                          MakeModelPassRunner(std::move(model)), std::move(options),
                                          metrics, max_work_bytes);
}

DynamicBatcher::~DynamicBatcher() { Shutdown(); }

void DynamicBatcher::Submit(InferenceTask task, DoneCallback done) {
  queue_.Submit(ForwardPlanner::Make(std::move(task), std::move(done)));
}

void DynamicBatcher::Shutdown() { queue_.Shutdown(); }

size_t DynamicBatcher::queue_depth() const { return queue_.depth(); }

}  // namespace mha::serve
