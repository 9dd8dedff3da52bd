#include "server/frontends/oip/model_statistics.h"

#include <prometheus/histogram.h>

#include <cstdint>

namespace mha::serve::oip {
namespace {

void SetDuration(uint64_t count, uint64_t ns, inference::StatisticDuration* out) {
  out->set_count(count);
  out->set_ns(ns);
}

// A histogram's observation count and the sum of its observations (seconds) in nanoseconds.
void SetDuration(const prometheus::Histogram* seconds, inference::StatisticDuration* out) {
  if (seconds == nullptr) return;
  const prometheus::ClientMetric metric = seconds->Collect();
  SetDuration(metric.histogram.sample_count,
              static_cast<uint64_t>(metric.histogram.sample_sum * 1e9), out);
}

}  // namespace

void FillModelStatistics(const ModelEntry& entry, const ModelMetrics& metrics,
                         inference::ModelStatistics* out) {
  out->set_name(entry.name);
  out->set_version(entry.version);
  const ModelMetrics::RequestTotals totals = metrics.totals();
  out->set_last_inference(totals.last_request_ms);
  if (metrics.batch_rows != nullptr) {
    out->set_inference_count(
        static_cast<uint64_t>(metrics.batch_rows->Collect().histogram.sample_sum));
  }
  if (metrics.batch_size != nullptr) {
    out->set_execution_count(metrics.batch_size->Collect().histogram.sample_count);
  }
  inference::InferStatistics* stats = out->mutable_inference_stats();
  SetDuration(totals.success_count, totals.success_ns, stats->mutable_success());
  SetDuration(totals.fail_count, totals.fail_ns, stats->mutable_fail());
  SetDuration(metrics.queue_duration, stats->mutable_queue());
  SetDuration(metrics.compute_duration, stats->mutable_compute_infer());
  // Present with zeros, as Triton sends them: clients read these without checking presence.
  stats->mutable_compute_input();
  stats->mutable_compute_output();
  stats->mutable_cache_hit();
  stats->mutable_cache_miss();
}

Status FillStatisticsResponse(const ModelRepository& repository, Metrics& metrics,
                              const std::string& name, const std::string& version,
                              inference::ModelStatisticsResponse* out) {
  if (!name.empty()) {
    auto entry = repository.Resolve(name, version);
    if (!entry.ok()) return entry.status();
    const ModelEntry& e = *entry.value();
    FillModelStatistics(e, *metrics.ForVersion(e.name, e.version), out->add_model_stats());
    return Status::Ok();
  }
  for (const auto& entry : repository.entries()) {  // "" = every READY model
    if (entry->state != ModelState::kReady) continue;
    if (!version.empty() && entry->version != version) continue;
    FillModelStatistics(*entry, *metrics.ForVersion(entry->name, entry->version),
                        out->add_model_stats());
  }
  return Status::Ok();
}

}  // namespace mha::serve::oip
