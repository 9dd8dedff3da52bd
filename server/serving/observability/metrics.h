// Prometheus metrics of mha-server. One Metrics object owns the prometheus-cpp registry and every
// family; handlers, runners and the batcher only call its recording methods. The family names
// are a contract (dashboards and alerts are written against them):
//   mha_requests_total{model,code}              counter, code = gRPC status name (OK, ...)
//   mha_protocol_requests_total{protocol,code}  counter, the same requests by front end:
//                                               protocol = mha.v1 or oip
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
//   mha_session_evictions_total{model}          counter, sessions evicted (evict-lru policy)
//   mha_session_step_duration_seconds{model}    histogram, session steps (handler start -> finish)
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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/protocol.h"

namespace mha::serve {

struct BuildInfo {
  std::string version;
  std::string torch_version;
  std::string device;  // "cpu" or "cuda"
};
// This binary's: project version, TORCH_VERSION, "cuda" when LibTorch sees a GPU else "cpu".
BuildInfo CurrentBuildInfo();

// One model version's statistics since the server started (Triton's ModelStatistics); atomics,
// updated without a lock by the version's scheduler and ServerCore's completion.
struct VersionStats {
  std::atomic<int64_t> inference_count{0};    // batch rows (sum of B) of the requests answered OK
  std::atomic<int64_t> execution_count{0};    // forward passes (a merged batch is one)
  std::atomic<int64_t> success_count{0};      // requests answered OK
  std::atomic<int64_t> failure_count{0};      // requests that reached the version and failed
  std::atomic<int64_t> queue_ns{0};           // summed over requests
  std::atomic<int64_t> compute_ns{0};         // summed over requests (each its batch's pass)
  std::atomic<int64_t> last_inference_ms{0};  // Unix time of the last answer; 0 = none yet
};

// mha_protocol_requests_total's counters, one per protocol and code, made on first use.
class ProtocolCounters {
 public:
  explicit ProtocolCounters(prometheus::Family<prometheus::Counter>* family) : family_(family) {}
  void Record(Protocol protocol, StatusCode code);

 private:
  prometheus::Family<prometheus::Counter>* const family_;
  std::array<std::atomic<prometheus::Counter*>, kProtocolCount * kStatusCodeCount> counters_{};
};

// The series of one model, looked up once (when the model's handle is made) and then used without
// any lock: prometheus-cpp's metrics are atomic. Status-code counters are made on first use.
class ModelMetrics {
 public:
  ModelMetrics(const std::string& model, prometheus::Family<prometheus::Counter>* requests,
               ProtocolCounters* protocols = nullptr);
  ModelMetrics(const ModelMetrics&) = delete;
  ModelMetrics& operator=(const ModelMetrics&) = delete;

  // One answered request: mha_requests_total{code}, mha_request_duration_seconds and
  // mha_protocol_requests_total{protocol,code}.
  void RecordRequest(StatusCode code, double seconds, Protocol protocol = Protocol::kNative);
  void RecordQueue(double seconds) { queue_duration->Observe(seconds); }
  void RecordCompute(double seconds) { compute_duration->Observe(seconds); }
  // One forward pass of `requests` requests, `rows` batch rows in all.
  void RecordBatch(int64_t requests, int64_t rows, int64_t real_tokens, int64_t padded_tokens);
  void SetQueueDepth(int64_t depth) { queue_depth->Set(static_cast<double>(depth)); }
  void AddInflight(int64_t delta) { inflight->Increment(static_cast<double>(delta)); }
  // Decoding sessions (per-version objects only; no-ops elsewhere).
  void SetSessionUsage(int64_t sessions, int64_t blocks_used, int64_t blocks_total,
                       int64_t block_bytes);
  void RecordSessionEviction() {
    if (session_evictions) session_evictions->Increment();
  }
  void RecordStep(double seconds) {
    if (step_duration) step_duration->Observe(seconds);
  }

  // Cumulative request totals kept beside the Prometheus series (which do not split durations by
  // outcome), for the Open Inference Protocol's ModelStatistics; not exported to /metrics.
  struct RequestTotals {
    uint64_t success_count = 0;
    uint64_t success_ns = 0;
    uint64_t fail_count = 0;
    uint64_t fail_ns = 0;
    uint64_t last_request_ms = 0;  // when the last request was answered, ms since the epoch
  };
  RequestTotals totals() const;

  const std::string model;
  prometheus::Histogram* request_duration = nullptr;
  prometheus::Histogram* queue_duration = nullptr;
  prometheus::Histogram* compute_duration = nullptr;
  prometheus::Histogram* batch_size = nullptr;
  prometheus::Histogram* batch_rows = nullptr;
  prometheus::Histogram* batch_tokens = nullptr;
  prometheus::Histogram* padding_efficiency = nullptr;
  prometheus::Counter* real_tokens = nullptr;
  prometheus::Counter* padded_tokens = nullptr;
  prometheus::Gauge* queue_depth = nullptr;
  prometheus::Gauge* inflight = nullptr;
  prometheus::Gauge* sessions_open = nullptr;  // per version
  prometheus::Gauge* kv_blocks_used = nullptr;
  prometheus::Gauge* kv_blocks_total = nullptr;
  prometheus::Gauge* kv_bytes_used = nullptr;
  prometheus::Counter* session_evictions = nullptr;
  prometheus::Histogram* step_duration = nullptr;
  VersionStats stats;  // used on the per-version objects (Metrics::ForVersion)

 private:
  static constexpr int kCodes = kStatusCodeCount;
  prometheus::Family<prometheus::Counter>* const requests_;
  ProtocolCounters* const protocols_;
  std::array<std::atomic<prometheus::Counter*>, kCodes> by_code_{};
  std::atomic<uint64_t> success_count_{0};
  std::atomic<uint64_t> success_ns_{0};
  std::atomic<uint64_t> fail_count_{0};
  std::atomic<uint64_t> fail_ns_{0};
  std::atomic<uint64_t> last_request_ms_{0};
};

class Metrics {
 public:
  explicit Metrics(const BuildInfo& build_info);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The model's series, made on first use; the pointer stays valid as long as this object.
  ModelMetrics* ForModel(const std::string& model);
  // The model's series with statistics of their own for one version: handles record here.
  ModelMetrics* ForVersion(const std::string& model, const std::string& version);
  // nullptr when the version never had a handle.
  const VersionStats* StatsFor(const std::string& model, const std::string& version);
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
  void RecordRequest(const std::string& model, StatusCode code, double seconds) {
    ForModel(model)->RecordRequest(code, seconds);
  }
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

  // Everything in the text exposition format: the registry, then the process (and GPU) metrics
  // read at call time.
  std::string Serialize() const;
  // The registry's families plus the scrape-time ones.
  std::vector<prometheus::MetricFamily> Collect() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_duration_;
  prometheus::Family<prometheus::Histogram>& compute_duration_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Family<prometheus::Histogram>& batch_rows_;
  prometheus::Family<prometheus::Histogram>& batch_tokens_;
  prometheus::Family<prometheus::Histogram>& padding_efficiency_;
  prometheus::Family<prometheus::Counter>& real_tokens_;
  prometheus::Family<prometheus::Counter>& padded_tokens_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& inflight_;
  prometheus::Family<prometheus::Gauge>& model_loaded_;
  prometheus::Family<prometheus::Gauge>& version_ready_;
  prometheus::Family<prometheus::Counter>& model_loads_;
  prometheus::Family<prometheus::Histogram>& model_load_duration_;
  prometheus::Family<prometheus::Counter>& model_unloads_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Counter>& protocol_requests_;
  ProtocolCounters protocols_;
  prometheus::Family<prometheus::Gauge>& sessions_open_;
  prometheus::Family<prometheus::Gauge>& kv_blocks_used_;
  prometheus::Family<prometheus::Gauge>& kv_blocks_total_;
  prometheus::Family<prometheus::Gauge>& kv_bytes_used_;
  prometheus::Family<prometheus::Counter>& session_evictions_;
  prometheus::Family<prometheus::Histogram>& step_duration_;

  std::mutex mu_;  // guards the maps only
  std::map<std::string, std::unique_ptr<ModelMetrics>> series_;
  std::map<std::string, prometheus::Gauge*> loaded_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<ModelMetrics>> versions_;
};

// Process metrics from /proc/self (resident memory, CPU seconds) and, on CUDA builds with a GPU,
// the caching allocator's memory per device. Empty families are left out.
std::vector<prometheus::MetricFamily> CollectProcessMetrics();

}  // namespace mha::serve
