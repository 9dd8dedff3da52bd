// Prometheus metrics of mha-server. One Metrics object owns the prometheus-cpp registry and every
// family; handlers, runners and the batcher only call its recording methods. The family names
// are a contract (dashboards and alerts are written against them):
//   mha_requests_total{model,code}              counter, code = gRPC status name (OK, ...)
//   mha_request_duration_seconds{model}         histogram, whole call (handler start -> finish)
//   mha_queue_duration_seconds{model}           histogram, enqueue -> forward pass start
//   mha_compute_duration_seconds{model}         histogram, the (batched) forward pass
//   mha_batch_size{model}                       histogram, requests per forward pass
//   mha_batch_rows{model}                       histogram, batch rows (sum of B) per pass
//   mha_batch_tokens{model}                     histogram, padded tokens per pass
//   mha_padding_efficiency{model}               histogram, real / padded tokens per pass
//   mha_real_tokens_total{model}, mha_padded_tokens_total{model}   counters
//   mha_queue_depth{model}, mha_inflight_requests{model}           gauges
//   mha_model_loaded{model}                     gauge, 1 READY / 0 FAILED
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

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/status.h"

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

  void RecordRequest(const std::string& model, StatusCode code, double seconds);
  void RecordQueue(const std::string& model, double seconds);
  void RecordCompute(const std::string& model, double seconds);
  // One forward pass of `requests` requests, `rows` batch rows in all.
  void RecordBatch(const std::string& model, int64_t requests, int64_t rows, int64_t real_tokens,
                   int64_t padded_tokens);
  void SetQueueDepth(const std::string& model, int64_t depth);
  void AddInflight(const std::string& model, int64_t delta);
  void SetModelLoaded(const std::string& model, bool loaded);

  // Everything in the text exposition format: the registry, then the process (and GPU) metrics
  // read at call time.
  std::string Serialize() const;
  // The registry's families plus the scrape-time ones.
  std::vector<prometheus::MetricFamily> Collect() const;

 private:
  struct ModelSeries {
    prometheus::Histogram* request_duration;
    prometheus::Histogram* queue_duration;
    prometheus::Histogram* compute_duration;
    prometheus::Histogram* batch_size;
    prometheus::Histogram* batch_rows;
    prometheus::Histogram* batch_tokens;
    prometheus::Histogram* padding_efficiency;
    prometheus::Counter* real_tokens;
    prometheus::Counter* padded_tokens;
    prometheus::Gauge* queue_depth;
    prometheus::Gauge* inflight;
    prometheus::Gauge* model_loaded;
    std::map<StatusCode, prometheus::Counter*> requests;
  };
  ModelSeries& Series(const std::string& model);  // created on first use; locks mu_

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
  prometheus::Family<prometheus::Gauge>& build_info_;

  std::mutex mu_;
  std::map<std::string, ModelSeries> series_;
};

// Process metrics from /proc/self (resident memory, CPU seconds) and, on CUDA builds with a GPU,
// the caching allocator's memory per device. Empty families are left out.
std::vector<prometheus::MetricFamily> CollectProcessMetrics();

}  // namespace mha::serve
