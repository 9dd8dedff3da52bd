#include "server/serving/scheduling/work_queue.h"

#include "server/serving/observability/stats_aggregator.h"

namespace mha::serve {

void PublishQueueDepth(StatsAggregator* metrics, size_t depth) {
  if (metrics) metrics->SetQueueDepth(static_cast<int64_t>(depth));
}

Status DropBeforePass(Clock::time_point deadline, bool cancelled, Clock::time_point arrival,
                      Clock::time_point now, double alone_us, const char* pass) {
  const std::string waited = std::to_string(MicrosBetween(arrival, now));
  if (now >= deadline) {
    return DeadlineExceeded("deadline passed after " + waited + " us in the queue, before the " +
                            pass);
  }
  if (cancelled) {
    return Cancelled("request cancelled after " + waited + " us in the queue, before the " + pass);
  }
  if (deadline == Clock::time_point::max()) return Status::Ok();
  // Its pass alone would end after its deadline: nobody would read the answer.
  const double left_us = std::chrono::duration<double, std::micro>(deadline - now).count();
  if (alone_us > 0 && alone_us > left_us) {
    return DeadlineExceeded("dropped before the " + std::string(pass) +
                            ": the deadline would pass during it (estimated " +
                            std::to_string(static_cast<int64_t>(alone_us)) + " us, " +
                            std::to_string(static_cast<int64_t>(left_us)) + " us left after " +
                            waited + " us in the queue)");
  }
  return Status::Ok();
}

}  // namespace mha::serve
