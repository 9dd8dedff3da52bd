#include "server/frontends/oip/model_statistics.h"

#include <cstdint>
#include <initializer_list>

namespace mha::serve::oip {
namespace {

void SetDuration(uint64_t count, uint64_t ns, inference::StatisticDuration* out) {
  out->set_count(count);
  out->set_ns(ns);
}

// A histogram's observation count and the sum of its observations (seconds) in nanoseconds.
void SetDuration(const AtomicHistogram::Snapshot& seconds, inference::StatisticDuration* out) {
  SetDuration(seconds.count, static_cast<uint64_t>(seconds.sum * 1e9), out);
}

}  // namespace

void FillModelStatistics(const VersionStatistics& v, inference::ModelStatistics* out) {
  const StatsSnapshot& s = v.stats;
  out->set_name(v.name);
  out->set_version(v.version);
  out->set_last_inference(static_cast<uint64_t>(s.last_inference_ms));
  out->set_inference_count(static_cast<uint64_t>(s.inference_count));
  out->set_execution_count(static_cast<uint64_t>(s.execution_count));
  inference::InferStatistics* stats = out->mutable_inference_stats();
  SetDuration(s.ok_calls, s.ok_ns, stats->mutable_success());
  SetDuration(s.failed_calls, s.failed_ns, stats->mutable_fail());
  SetDuration(s.queue, stats->mutable_queue());
  // The computed requests' stages (Stage): input = decode + merge, infer = the forward pass,
  // output = split + handoff + respond.
  auto ns = [&s](std::initializer_list<Stage> stages) {
    uint64_t sum = 0;
    for (Stage st : stages) sum += s.stage_ns[static_cast<size_t>(st)];
    return sum;
  };
  SetDuration(s.staged, ns({Stage::kDecode, Stage::kMerge}), stats->mutable_compute_input());
  SetDuration(s.staged, ns({Stage::kForward}), stats->mutable_compute_infer());
  SetDuration(s.staged, ns({Stage::kSplit, Stage::kHandoff, Stage::kRespond}),
              stats->mutable_compute_output());
  // Present with zeros, as Triton sends them: clients read these without checking presence.
  stats->mutable_cache_hit();
  stats->mutable_cache_miss();
}

Status FillStatisticsResponse(InferenceServer& core, const std::string& name,
                              const std::string& version, inference::ModelStatisticsResponse* out) {
  auto stats = core.Statistics(name, version);
  if (!stats.ok()) return stats.status();
  for (const VersionStatistics& v : *stats) FillModelStatistics(v, out->add_model_stats());
  return Status::Ok();
}

}  // namespace mha::serve::oip
