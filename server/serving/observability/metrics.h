// Prometheus metrics of mha-server. One Metrics object owns one statistics aggregator per model
// version (stats_aggregator.h: lock-free, read by every statistics API too) and, for the lifecycle
// series, a prometheus-cpp registry; handlers, schedulers and sessions only call the aggregators'
// recording methods. The family names are a contract (dashboards and alerts are written
// against them):
//   mha_requests_total{model,code}              counter, code = gRPC status name (OK, ...)
//   mha_protocol_requests_total{protocol,code}  counter, the same requests by front end:
//                                               protocol = mha.v1, oip or rest
//                                               (server/serving/protocol.h)
//   mha_request_duration_seconds{model}         histogram, whole call (handler start -> finish)
//   mha_queue_duration_seconds{model}           histogram, enqueue -> forward pass start
//   mha_compute_duration_seconds{model}         histogram, the (batched) forward pass
//   mha_batch_size{model}                       histogram, requests per forward pass
//   mha_batch_rows{model}                       histogram, batch rows (sum of B) per pass
//   mha_batch_tokens{model}                     histogram, padded tokens per pass
//   mha_padding_efficiency{model}               histogram, real / padded tokens per pass
//   mha_real_tokens_total{model}, mha_padded_tokens_total{model}   counters
//   mha_queue_depth{model}, mha_inflight_requests{model}           gauges
//   mha_model_loaded{model}                     gauge, 1 while a version is READY, else 0
//   mha_model_version_ready{model,version}      gauge, 1 while the version is READY, else 0
//   mha_model_loads_total{model,result}         counter, version loads: success / failure
//   mha_model_load_duration_seconds{model}      histogram, load + warmup of one version
//   mha_model_unloads_total{model}              counter, versions unloaded (drained)
//   mha_sessions_open{model,version}            gauge, decoding sessions open (docs/sessions.md)
//   mha_kv_cache_blocks_used{model,version}, mha_kv_cache_blocks_total{model,version}  gauges
//   mha_kv_cache_bytes_used{model,version}      gauge, bytes of the KV blocks in use
//   mha_kv_cache_bytes_per_token{model,version} gauge, a token of one layer in the KV cache dtype
//   mha_session_evictions_total{model}          counter, sessions evicted (evict-lru policy)
//   mha_session_step_duration_seconds{model}    histogram, session steps (handler start -> finish)
//   mha_kv_cache_blocks_shared{model,version}   gauge, blocks held by more than one session (forks)
//   mha_kv_cache_copies_on_write_total{model,version}  counter, shared blocks copied on a write
//   mha_sessions_spilled{model,version}, mha_kv_spill_bytes{model,version}  gauges (spill policy)
//   mha_session_spills_total{model}, mha_session_restores_total{model}  counters
//   mha_session_restore_duration_seconds{model} histogram, a spilled session's restore
//   mha_request_stage_seconds_total{model,stage} counter, computed requests' time by stage
//                                               (decode queue merge forward split handoff respond)
//   mha_staged_requests_total{model}            counter, the requests counted in it
//   mha_build_info{version,torch_version,device} gauge = 1
//   process_resident_memory_bytes, process_cpu_seconds_total       read from /proc at scrape
//   mha_gpu_memory_allocated_bytes{device}, mha_gpu_memory_reserved_bytes{device}  (CUDA only)
// A "token" is one query row of one batch element, plus one key row for cross-attention.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/protocol.h"

namespace mha::serve {

struct BuildInfo {
  std::string version;
  std::string torch_version;
  std::string device;  // "cpu" or "cuda"
};
// This binary's: project version, TORCH_VERSION, "cuda" when LibTorch sees a GPU else "cpu".
BuildInfo CurrentBuildInfo();

class Metrics {
 public:
  explicit Metrics(const BuildInfo& build_info);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The model's aggregator for requests that reached no version (version ""), made on first use;
  // the pointer stays valid as long as this object.
  StatsAggregator* ForModel(const std::string& model);
  // One version's aggregator, made on first use: handles record here.
  StatsAggregator* ForVersion(const std::string& model, const std::string& version);
  // nullptr when the version never had one; reading never makes one.
  const StatsAggregator* StatsFor(const std::string& model, const std::string& version) const;
  void SetModelLoaded(const std::string& model, bool loaded);
  // An unloaded model (UnloadModel, or its folder removed): its mha_model_loaded series goes, so
  // that "model not loaded" alerts only fire for models that should be serving.
  void RemoveModelLoaded(const std::string& model);
  // mha_model_version_ready{model,version}: 1 while that version is READY and routed to.
  void SetVersionReady(const std::string& model, const std::string& version, bool ready);
  // One version load (with its warmup) and its outcome; one version unloaded.
  void RecordModelLoad(const std::string& model, bool ok, double seconds);
  void RecordModelUnload(const std::string& model);

  // By name (looks the model up each time; tests and one-off callers).
  void RecordQueue(const std::string& model, double seconds) {
    ForModel(model)->RecordQueue(seconds);
  }
  void RecordCompute(const std::string& model, double seconds) {
    ForModel(model)->RecordCompute(seconds);
  }
  void RecordBatch(const std::string& model, int64_t requests, int64_t rows, int64_t real_tokens,
                   int64_t padded_tokens) {
    ForModel(model)->RecordBatch(requests, rows, real_tokens, padded_tokens);
  }
  void SetQueueDepth(const std::string& model, int64_t depth) {
    ForModel(model)->SetQueueDepth(depth);
  }
  void AddInflight(const std::string& model, int64_t delta) { ForModel(model)->AddInflight(delta); }

  // Everything in the text exposition format: the registry (lifecycle series), the aggregators,
  // then the process (and GPU) metrics read at call time.
  std::string Serialize() const;
  std::vector<prometheus::MetricFamily> Collect() const;
  // Families another part of the server builds at each scrape (the shared KV tier's), after the
  // aggregators'. `collect` must stay valid as long as this object.
  void AddCollector(std::function<std::vector<prometheus::MetricFamily>()> collect);

 private:
  StatsAggregator* Find(const std::string& model, const std::string& version);

  // Lifecycle and build series: rare events, kept in prometheus-cpp's registry.
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& model_loaded_;
  prometheus::Family<prometheus::Gauge>& version_ready_;
  prometheus::Family<prometheus::Counter>& model_loads_;
  prometheus::Family<prometheus::Histogram>& model_load_duration_;
  prometheus::Family<prometheus::Counter>& model_unloads_;
  prometheus::Family<prometheus::Gauge>& build_info_;

  mutable std::mutex mu_;  // guards the maps only (never taken while recording)
  std::map<std::string, prometheus::Gauge*> loaded_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<StatsAggregator>> aggregators_;
  std::vector<std::function<std::vector<prometheus::MetricFamily>()>> collectors_;
};

// Process metrics from /proc/self (resident memory, CPU seconds) and, on CUDA builds with a GPU,
// the caching allocator's memory per device. Empty families are left out.
std::vector<prometheus::MetricFamily> CollectProcessMetrics();

}  // namespace mha::serve
