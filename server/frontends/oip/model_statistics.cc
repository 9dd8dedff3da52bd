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

StatsSnapshot VersionSnapshot(const Metrics& metrics, const ModelEntry& entry) {
  const StatsAggregator* aggregator = metrics.StatsFor(entry.name, entry.version);
  return aggregator ? aggregator->Read() : StatsSnapshot();
}

void FillModelStatistics(const ModelEntry& entry, const StatsSnapshot& s,
                         inference::ModelStatistics* out) {
  out->set_name(entry.name);
  out->set_version(entry.version);
  out->set_last_inference(static_cast<uint64_t>(s.last_inference_ms));
  out->set_inference_count(static_cast<uint64_t>(s.batch_rows.sum));
  out->set_execution_count(s.batch_size.count);
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

Status FillStatisticsResponse(const ModelRepository& repository, const Metrics& metrics,
                              const std::string& name, const std::string& version,
                              inference::ModelStatisticsResponse* out) {
  if (!name.empty()) {
    auto entry = repository.Resolve(name, version);
    if (!entry.ok()) return entry.status();
    const ModelEntry& e = *entry.value();
    FillModelStatistics(e, VersionSnapshot(metrics, e), out->add_model_stats());
    return Status::Ok();
  }
  for (const auto& entry : repository.entries()) {  // "" = every READY model
    if (entry->state != ModelState::kReady) continue;
    if (!version.empty() && entry->version != version) continue;
    FillModelStatistics(*entry, VersionSnapshot(metrics, *entry), out->add_model_stats());
  }
  return Status::Ok();
}

}  // namespace mha::serve::oip
