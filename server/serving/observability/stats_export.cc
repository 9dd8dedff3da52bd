#include "server/serving/observability/stats_export.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

namespace mha::serve {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

struct ModelSum {
  StatsSnapshot all;         // every aggregator of the model
  bool has_version = false;  // a version was served: its session series exist
  std::vector<std::pair<std::string, StatsSnapshot>> versions;
};

// Labels sorted by name, as prometheus-cpp's families keep them (the text format shows that order).
ClientMetric Labelled(std::vector<ClientMetric::Label> labels) {
  std::sort(labels.begin(), labels.end());
  ClientMetric m;
  m.label = std::move(labels);
  return m;
}

ClientMetric Histogram(std::vector<ClientMetric::Label> labels, const AtomicHistogram::Snapshot& h,
                       const std::vector<double>& bounds) {
  ClientMetric m = Labelled(std::move(labels));
  m.histogram.sample_count = h.count;
  m.histogram.sample_sum = h.sum;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += i < h.buckets.size() ? h.buckets[i] : 0;
    m.histogram.bucket.push_back(
        {cumulative, i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity()});
  }
  return m;
}

MetricFamily Family(const char* name, const char* help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void AddCounter(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m = Labelled(std::move(labels));
  m.counter.value = value;
  f.metric.push_back(std::move(m));
}

void AddGauge(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m = Labelled(std::move(labels));
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

// mha_requests_total{model,code} and mha_protocol_requests_total{protocol,code}: a code's series
// from its first call on.
void ExportCalls(const std::map<std::string, ModelSum>& models, std::vector<MetricFamily>* out) {
  MetricFamily requests =
      Family("mha_requests_total", "Forward calls answered, by model and gRPC status code",
             MetricType::Counter);
  MetricFamily protocols = Family(
      "mha_protocol_requests_total",
      "Forward calls answered, by front end (mha.v1, oip, rest) and code", MetricType::Counter);
  std::array<uint64_t, kProtocolCount * kStatusCodeCount> by_protocol{};
  for (const auto& [model, sum] : models) {
    for (int c = 0; c < kStatusCodeCount; ++c) {
      const uint64_t n = sum.all.Calls(static_cast<StatusCode>(c));
      if (n > 0) {
        AddCounter(requests,
                   {{"model", model}, {"code", StatusCodeName(static_cast<StatusCode>(c))}},
                   static_cast<double>(n));
      }
    }
    for (size_t i = 0; i < by_protocol.size(); ++i) by_protocol[i] += sum.all.by_protocol_code[i];
  }
  for (int p = 0; p < kProtocolCount; ++p) {
    for (int c = 0; c < kStatusCodeCount; ++c) {
      const uint64_t n = by_protocol[static_cast<size_t>(p * kStatusCodeCount + c)];
      if (n == 0) continue;
      AddCounter(protocols,
                 {{"protocol", ProtocolName(static_cast<Protocol>(p))},
                  {"code", StatusCodeName(static_cast<StatusCode>(c))}},
                 static_cast<double>(n));
    }
  }
  out->push_back(std::move(requests));
  out->push_back(std::move(protocols));
}

using HistogramOf = AtomicHistogram::Snapshot StatsSnapshot::*;

void ExportHistogram(const std::map<std::string, ModelSum>& models, const char* name,
                     const char* help, HistogramOf field, const std::vector<double>& bounds,
                     bool versions_only, std::vector<MetricFamily>* out) {
  MetricFamily f = Family(name, help, MetricType::Histogram);
  for (const auto& [model, sum] : models) {
    if (versions_only && !sum.has_version) continue;
    f.metric.push_back(Histogram({{"model", model}}, sum.all.*field, bounds));
  }
  out->push_back(std::move(f));
}

void ExportModelSeries(const std::map<std::string, ModelSum>& models,
                       std::vector<MetricFamily>* out) {
  ExportHistogram(models, "mha_request_duration_seconds",
                  "Forward call duration in the server (handler start to finish)",
                  &StatsSnapshot::request, DurationBounds(), false, out);
  ExportHistogram(models, "mha_queue_duration_seconds",
                  "Time from enqueue to the start of the forward pass", &StatsSnapshot::queue,
                  DurationBounds(), false, out);
  ExportHistogram(models, "mha_compute_duration_seconds",
                  "Forward pass time (of the whole batch the request ran in)",
                  &StatsSnapshot::compute, DurationBounds(), false, out);
  ExportHistogram(models, "mha_batch_size", "Requests merged into one forward pass",
                  &StatsSnapshot::batch_size, CountBounds(), false, out);
  ExportHistogram(models, "mha_batch_rows",
                  "Batch rows (sum of the requests' B) of one forward pass",
                  &StatsSnapshot::batch_rows, CountBounds(), false, out);
  ExportHistogram(models, "mha_batch_tokens", "Padded tokens of one forward pass",
                  &StatsSnapshot::batch_tokens, TokenBounds(), false, out);
  ExportHistogram(models, "mha_padding_efficiency", "Real / padded tokens of one forward pass",
                  &StatsSnapshot::padding, EfficiencyBounds(), false, out);
  ExportHistogram(models, "mha_session_step_duration_seconds",
                  "Session step duration in the server (handler start to finish)",
                  &StatsSnapshot::step, DurationBounds(), true, out);
  ExportHistogram(models, "mha_session_restore_duration_seconds",
                  "A spilled session's restore into the KV cache pool (spill policy)",
                  &StatsSnapshot::restore, DurationBounds(), true, out);
  MetricFamily real =
      Family("mha_real_tokens_total", "Tokens of the requests themselves", MetricType::Counter);
  MetricFamily padded =
      Family("mha_padded_tokens_total", "Tokens computed, padding included", MetricType::Counter);
  MetricFamily depth =
      Family("mha_queue_depth", "Requests waiting for a forward pass", MetricType::Gauge);
  MetricFamily inflight =
      Family("mha_inflight_requests", "Requests accepted and not yet answered", MetricType::Gauge);
  MetricFamily evictions =
      Family("mha_session_evictions_total", "Idle sessions evicted to free KV cache blocks",
             MetricType::Counter);
  MetricFamily spills =
      Family("mha_session_spills_total", "Idle sessions spilled to free KV cache blocks",
             MetricType::Counter);
  MetricFamily restores =
      Family("mha_session_restores_total", "Spilled sessions restored at their next step",
             MetricType::Counter);
  for (const auto& [model, sum] : models) {
    AddCounter(real, {{"model", model}}, sum.all.real_tokens);
    AddCounter(padded, {{"model", model}}, sum.all.padded_tokens);
    AddGauge(depth, {{"model", model}}, static_cast<double>(sum.all.queue_depth));
    AddGauge(inflight, {{"model", model}}, static_cast<double>(sum.all.inflight));
    if (sum.has_version) {
      AddCounter(evictions, {{"model", model}}, static_cast<double>(sum.all.session_evictions));
      AddCounter(spills, {{"model", model}}, static_cast<double>(sum.all.session_spills));
      AddCounter(restores, {{"model", model}}, static_cast<double>(sum.all.session_restores));
    }
  }
  for (auto* f : {&real, &padded, &depth, &inflight, &evictions, &spills, &restores}) {
    out->push_back(std::move(*f));
  }
}

void ExportSessions(const std::map<std::string, ModelSum>& models, std::vector<MetricFamily>* out) {
  MetricFamily open =
      Family("mha_sessions_open", "Decoding sessions open on the model version", MetricType::Gauge);
  MetricFamily used =
      Family("mha_kv_cache_blocks_used", "KV cache blocks held by sessions", MetricType::Gauge);
  MetricFamily total =
      Family("mha_kv_cache_blocks_total",
             "KV cache blocks in the version's pool (--kv-cache-bytes)", MetricType::Gauge);
  MetricFamily bytes = Family("mha_kv_cache_bytes_used",
                              "Bytes of the KV cache blocks held by sessions", MetricType::Gauge);
  MetricFamily per_token = Family("mha_kv_cache_bytes_per_token",
                                  "Bytes a token of one layer takes in the version's KV cache (its "
                                  "kv_cache_dtype, scales included)",
                                  MetricType::Gauge);
  MetricFamily shared = Family("mha_kv_cache_blocks_shared",
                               "KV cache blocks held by more than one session (forks; counted "
                               "once in mha_kv_cache_blocks_used)",
                               MetricType::Gauge);
  MetricFamily copies =
      Family("mha_kv_cache_copies_on_write_total",
             "Shared KV cache blocks copied when a session wrote into them", MetricType::Counter);
  MetricFamily spilled = Family("mha_sessions_spilled",
                                "Sessions whose KV cache is in the spill store", MetricType::Gauge);
  MetricFamily spill_bytes = Family(
      "mha_kv_spill_bytes", "Bytes of the spilled sessions' keys and values", MetricType::Gauge);
  for (const auto& [model, sum] : models) {
    for (const auto& [version, s] : sum.versions) {
      const std::vector<ClientMetric::Label> labels{{"model", model}, {"version", version}};
      AddGauge(open, labels, static_cast<double>(s.sessions_open));
      AddGauge(used, labels, static_cast<double>(s.kv_blocks_used));
      AddGauge(total, labels, static_cast<double>(s.kv_blocks_total));
      AddGauge(bytes, labels, static_cast<double>(s.kv_bytes_used));
      AddGauge(per_token, labels, static_cast<double>(s.kv_bytes_per_token));
      AddGauge(shared, labels, static_cast<double>(s.kv_blocks_shared));
      AddCounter(copies, labels, static_cast<double>(s.kv_copies_on_write));
      AddGauge(spilled, labels, static_cast<double>(s.sessions_spilled));
      AddGauge(spill_bytes, labels, static_cast<double>(s.kv_spill_bytes));
    }
  }
  for (auto* f :
       {&open, &used, &total, &bytes, &per_token, &shared, &copies, &spilled, &spill_bytes}) {
    out->push_back(std::move(*f));
  }
}

// mha_request_stage_seconds_total{model,stage} over mha_staged_requests_total{model}: where a
// computed request's time goes in the server (Stage), for bench/breakdown.py and dashboards.
void ExportStages(const std::map<std::string, ModelSum>& models, std::vector<MetricFamily>* out) {
  MetricFamily seconds = Family("mha_request_stage_seconds_total",
                                "Time of the computed requests in each stage of the server "
                                "(decode, queue, merge, forward, split, handoff, respond)",
                                MetricType::Counter);
  MetricFamily staged =
      Family("mha_staged_requests_total",
             "Computed requests counted in mha_request_stage_seconds_total", MetricType::Counter);
  for (const auto& [model, sum] : models) {
    if (!sum.has_version) continue;
    for (int i = 0; i < kStageCount; ++i) {
      AddCounter(seconds, {{"model", model}, {"stage", StageName(static_cast<Stage>(i))}},
                 static_cast<double>(sum.all.stage_ns[static_cast<size_t>(i)]) * 1e-9);
    }
    AddCounter(staged, {{"model", model}}, static_cast<double>(sum.all.staged));
  }
  out->push_back(std::move(seconds));
  out->push_back(std::move(staged));
}

}  // namespace

std::vector<MetricFamily> ExportStats(const std::vector<const StatsAggregator*>& aggregators) {
  std::map<std::string, ModelSum> models;
  for (const StatsAggregator* a : aggregators) {
    const StatsSnapshot s = a->Read();
    ModelSum& sum = models[a->model];
    sum.all.Add(s);
    if (!a->version.empty()) {
      sum.has_version = true;
      sum.versions.emplace_back(a->version, s);
    }
  }
  std::vector<MetricFamily> out;
  ExportCalls(models, &out);
  ExportModelSeries(models, &out);
  ExportSessions(models, &out);
  ExportStages(models, &out);
  return out;
}

}  // namespace mha::serve
