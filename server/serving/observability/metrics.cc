#include "server/serving/observability/metrics.h"

#include <ATen/Context.h>
#include <prometheus/text_serializer.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#ifndef MHA_VERSION
#define MHA_VERSION "0.1.0"
#endif

namespace mha::serve {
namespace {

using prometheus::Histogram;

// 50 us, 100 us, ... doubling up to ~13 s.
Histogram::BucketBoundaries DurationBuckets() {
  Histogram::BucketBoundaries buckets;
  for (double b = 50e-6; b < 14.0; b *= 2) buckets.push_back(b);
  return buckets;
}

Histogram::BucketBoundaries CountBuckets() {
  return {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024};
}

Histogram::BucketBoundaries TokenBuckets() {
  Histogram::BucketBoundaries buckets;
  for (double b = 16; b <= 1 << 20; b *= 2) buckets.push_back(b);
  return buckets;
}

Histogram::BucketBoundaries EfficiencyBuckets() {
  return {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0};
}

template <typename Builder>
auto& Register(Builder builder, const char* name, const char* help,
               prometheus::Registry& registry) {
  return builder.Name(name).Help(help).Register(registry);
}

}  // namespace

BuildInfo CurrentBuildInfo() {
  return BuildInfo{MHA_VERSION, TORCH_VERSION, at::hasCUDA() ? "cuda" : "cpu"};
}

Metrics::Metrics(const BuildInfo& build_info)
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(Register(prometheus::BuildCounter(), "mha_requests_total",
                         "Forward calls answered, by model and gRPC status code", *registry_)),
      request_duration_(Register(prometheus::BuildHistogram(), "mha_request_duration_seconds",
                                 "Forward call duration in the server (handler start to finish)",
                                 *registry_)),
      queue_duration_(Register(prometheus::BuildHistogram(), "mha_queue_duration_seconds",
                               "Time from enqueue to the start of the forward pass", *registry_)),
      compute_duration_(Register(prometheus::BuildHistogram(), "mha_compute_duration_seconds",
                                 "Forward pass time (of the whole batch the request ran in)",
                                 *registry_)),
      batch_size_(Register(prometheus::BuildHistogram(), "mha_batch_size",
                           "Requests merged into one forward pass", *registry_)),
      batch_rows_(Register(prometheus::BuildHistogram(), "mha_batch_rows",
                           "Batch rows (sum of the requests' B) of one forward pass", *registry_)),
      batch_tokens_(Register(prometheus::BuildHistogram(), "mha_batch_tokens",
                             "Padded tokens of one forward pass", *registry_)),
      padding_efficiency_(Register(prometheus::BuildHistogram(), "mha_padding_efficiency",
                                   "Real / padded tokens of one forward pass", *registry_)),
      real_tokens_(Register(prometheus::BuildCounter(), "mha_real_tokens_total",
                            "Tokens of the requests themselves", *registry_)),
      padded_tokens_(Register(prometheus::BuildCounter(), "mha_padded_tokens_total",
                              "Tokens computed, padding included", *registry_)),
      queue_depth_(Register(prometheus::BuildGauge(), "mha_queue_depth",
                            "Requests waiting for a forward pass", *registry_)),
      inflight_(Register(prometheus::BuildGauge(), "mha_inflight_requests",
                         "Requests accepted and not yet answered", *registry_)),
      model_loaded_(Register(prometheus::BuildGauge(), "mha_model_loaded",
                             "1 when the model is READY, 0 when it failed to load", *registry_)),
      version_ready_(Register(prometheus::BuildGauge(), "mha_model_version_ready",
                              "1 while the model version is READY and routed to, else 0",
                              *registry_)),
      model_loads_(Register(prometheus::BuildCounter(), "mha_model_loads_total",
                            "Model version loads (warmup included), by result: success, failure",
                            *registry_)),
      model_load_duration_(Register(prometheus::BuildHistogram(), "mha_model_load_duration_seconds",
                                    "Time to load and warm up one model version", *registry_)),
      model_unloads_(Register(prometheus::BuildCounter(), "mha_model_unloads_total",
                              "Model versions unloaded (after their requests were answered)",
                              *registry_)),
      build_info_(Register(prometheus::BuildGauge(), "mha_build_info",
                           "Always 1; the labels describe the build", *registry_)),
      protocol_requests_(Register(prometheus::BuildCounter(), "mha_protocol_requests_total",
                                  "Forward calls answered, by front end (mha.v1, oip) and code",
                                  *registry_)),
      protocols_(&protocol_requests_),
      sessions_open_(Register(prometheus::BuildGauge(), "mha_sessions_open",
                              "Decoding sessions open on the model version", *registry_)),
      kv_blocks_used_(Register(prometheus::BuildGauge(), "mha_kv_cache_blocks_used",
                               "KV cache blocks held by sessions", *registry_)),
      kv_blocks_total_(Register(prometheus::BuildGauge(), "mha_kv_cache_blocks_total",
                                "KV cache blocks in the version's pool (--kv-cache-bytes)",
                                *registry_)),
      kv_bytes_used_(Register(prometheus::BuildGauge(), "mha_kv_cache_bytes_used",
                              "Bytes of the KV cache blocks held by sessions", *registry_)),
      session_evictions_(Register(prometheus::BuildCounter(), "mha_session_evictions_total",
                                  "Idle sessions evicted to free KV cache blocks", *registry_)),
      step_duration_(Register(prometheus::BuildHistogram(), "mha_session_step_duration_seconds",
                              "Session step duration in the server (handler start to finish)",
                              *registry_)) {
  build_info_
      .Add({{"version", build_info.version},
            {"torch_version", build_info.torch_version},
            {"device", build_info.device}})
      .Set(1);
}

ModelMetrics::ModelMetrics(const std::string& model_name,
                           prometheus::Family<prometheus::Counter>* requests,
                           ProtocolCounters* protocols)
    : model(model_name), requests_(requests), protocols_(protocols) {}

void ProtocolCounters::Record(Protocol protocol, StatusCode code) {
  const int c = static_cast<int>(code);
  const prometheus::Labels labels{{"protocol", ProtocolName(protocol)},
                                  {"code", StatusCodeName(code)}};
  if (c < 0 || c >= kStatusCodeCount) {
    family_->Add(labels).Increment();
    return;
  }
  auto& slot = counters_[static_cast<size_t>(protocol) * kStatusCodeCount + c];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (!counter) {
    counter = &family_->Add(labels);  // thread-safe; the same counter for the same labels
    slot.store(counter, std::memory_order_release);
  }
  counter->Increment();
}

void ModelMetrics::RecordRequest(StatusCode code, double seconds, Protocol protocol) {
  if (protocols_ != nullptr) protocols_->Record(protocol, code);
  const int index = static_cast<int>(code);
  prometheus::Counter* counter = nullptr;
  if (index >= 0 && index < kCodes) {
    counter = by_code_[index].load(std::memory_order_acquire);
    if (!counter) {
      // Family::Add is thread-safe and returns the same counter for the same labels.
      counter = &requests_->Add({{"model", model}, {"code", StatusCodeName(code)}});
      by_code_[index].store(counter, std::memory_order_release);
    }
  } else {
    counter = &requests_->Add({{"model", model}, {"code", StatusCodeName(code)}});
  }
  counter->Increment();
  request_duration->Observe(seconds);
  const auto ns = static_cast<uint64_t>(std::max(0.0, seconds) * 1e9);
  if (code == StatusCode::kOk) {
    success_count_.fetch_add(1, std::memory_order_relaxed);
    success_ns_.fetch_add(ns, std::memory_order_relaxed);
  } else {
    fail_count_.fetch_add(1, std::memory_order_relaxed);
    fail_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  last_request_ms_.store(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()),
      std::memory_order_relaxed);
}

ModelMetrics::RequestTotals ModelMetrics::totals() const {
  RequestTotals t;
  t.success_count = success_count_.load(std::memory_order_relaxed);
  t.success_ns = success_ns_.load(std::memory_order_relaxed);
  t.fail_count = fail_count_.load(std::memory_order_relaxed);
  t.fail_ns = fail_ns_.load(std::memory_order_relaxed);
  t.last_request_ms = last_request_ms_.load(std::memory_order_relaxed);
  return t;
}

void ModelMetrics::SetSessionUsage(int64_t sessions, int64_t used, int64_t total,
                                   int64_t block_bytes) {
  if (!sessions_open) return;
  sessions_open->Set(static_cast<double>(sessions));
  kv_blocks_used->Set(static_cast<double>(used));
  kv_blocks_total->Set(static_cast<double>(total));
  kv_bytes_used->Set(static_cast<double>(used * block_bytes));
}

void ModelMetrics::RecordBatch(int64_t requests, int64_t rows, int64_t real, int64_t padded) {
  stats.execution_count.fetch_add(1, std::memory_order_relaxed);
  batch_size->Observe(static_cast<double>(requests));
  batch_rows->Observe(static_cast<double>(rows));
  batch_tokens->Observe(static_cast<double>(padded));
  if (padded > 0) padding_efficiency->Observe(static_cast<double>(real) / padded);
  real_tokens->Increment(static_cast<double>(real));
  padded_tokens->Increment(static_cast<double>(padded));
}

ModelMetrics* Metrics::ForModel(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(model);
  if (it != series_.end()) return it->second.get();
  const prometheus::Labels labels{{"model", model}};
  auto s = std::make_unique<ModelMetrics>(model, &requests_, &protocols_);
  s->request_duration = &request_duration_.Add(labels, DurationBuckets());
  s->queue_duration = &queue_duration_.Add(labels, DurationBuckets());
  s->compute_duration = &compute_duration_.Add(labels, DurationBuckets());
  s->batch_size = &batch_size_.Add(labels, CountBuckets());
  s->batch_rows = &batch_rows_.Add(labels, CountBuckets());
  s->batch_tokens = &batch_tokens_.Add(labels, TokenBuckets());
  s->padding_efficiency = &padding_efficiency_.Add(labels, EfficiencyBuckets());
  s->real_tokens = &real_tokens_.Add(labels);
  s->padded_tokens = &padded_tokens_.Add(labels);
  s->queue_depth = &queue_depth_.Add(labels);
  s->inflight = &inflight_.Add(labels);
  return series_.emplace(model, std::move(s)).first->second.get();
}

ModelMetrics* Metrics::ForVersion(const std::string& model, const std::string& version) {
  ModelMetrics* shared = ForModel(model);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = versions_[{model, version}];
  if (slot) return slot.get();
  slot = std::make_unique<ModelMetrics>(model, &requests_, &protocols_);
  slot->request_duration = shared->request_duration;
  slot->queue_duration = shared->queue_duration;
  slot->compute_duration = shared->compute_duration;
  slot->batch_size = shared->batch_size;
  slot->batch_rows = shared->batch_rows;
  slot->batch_tokens = shared->batch_tokens;
  slot->padding_efficiency = shared->padding_efficiency;
  slot->real_tokens = shared->real_tokens;
  slot->padded_tokens = shared->padded_tokens;
  slot->queue_depth = shared->queue_depth;
  slot->inflight = shared->inflight;
  const prometheus::Labels labels{{"model", model}, {"version", version}};
  slot->sessions_open = &sessions_open_.Add(labels);
  slot->kv_blocks_used = &kv_blocks_used_.Add(labels);
  slot->kv_blocks_total = &kv_blocks_total_.Add(labels);
  slot->kv_bytes_used = &kv_bytes_used_.Add(labels);
  slot->session_evictions = &session_evictions_.Add({{"model", model}});
  slot->step_duration = &step_duration_.Add({{"model", model}}, DurationBuckets());
  return slot.get();
}

const VersionStats* Metrics::StatsFor(const std::string& model, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = versions_.find({model, version});
  return it == versions_.end() ? nullptr : &it->second->stats;
}

void Metrics::SetVersionReady(const std::string& model, const std::string& version, bool ready) {
  version_ready_.Add({{"model", model}, {"version", version}}).Set(ready ? 1 : 0);
}

void Metrics::SetModelLoaded(const std::string& model, bool loaded) {
  ForModel(model);  // the model's other series exist from here on, as before
  prometheus::Gauge* gauge = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = loaded_[model];
    if (!slot) slot = &model_loaded_.Add({{"model", model}});
    gauge = slot;
  }
  gauge->Set(loaded ? 1 : 0);
}

void Metrics::RecordModelLoad(const std::string& model, bool ok, double seconds) {
  model_loads_.Add({{"model", model}, {"result", ok ? "success" : "failure"}}).Increment();
  model_load_duration_.Add({{"model", model}}, DurationBuckets()).Observe(seconds);
  // Both outcomes and the unloads exist from the first load on, at 0 until they happen, so that
  // rate() and increase() see them start (Prometheus' advice for counters with labels).
  model_loads_.Add({{"model", model}, {"result", ok ? "failure" : "success"}});
  model_unloads_.Add({{"model", model}});
}

void Metrics::RecordModelUnload(const std::string& model) {
  model_unloads_.Add({{"model", model}}).Increment();
}

void Metrics::RemoveModelLoaded(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(model);
  if (it == loaded_.end()) return;
  model_loaded_.Remove(it->second);
  loaded_.erase(it);
}

std::vector<prometheus::MetricFamily> Metrics::Collect() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (auto& family : CollectProcessMetrics()) families.push_back(std::move(family));
  return families;
}

std::string Metrics::Serialize() const { return prometheus::TextSerializer().Serialize(Collect()); }

}  // namespace mha::serve
