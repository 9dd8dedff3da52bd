#include "server/serving/observability/metrics.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "mha/runtime.h"
#include "server/serving/observability/stats_export.h"

#ifndef MHA_VERSION
#define MHA_VERSION "0.1.0"
#endif

namespace mha::serve {
namespace {

using prometheus::Histogram;

Histogram::BucketBoundaries DurationBuckets() { return DurationBounds(); }

template <typename Builder>
auto& Register(Builder builder, const char* name, const char* help,
               prometheus::Registry& registry) {
  return builder.Name(name).Help(help).Register(registry);
}

}  // namespace

BuildInfo CurrentBuildInfo() {
  return BuildInfo{MHA_VERSION, TorchVersion(), CudaAvailable() ? "cuda" : "cpu"};
}

Metrics::Metrics(const BuildInfo& build_info)
    : registry_(std::make_shared<prometheus::Registry>()),
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
                           "Always 1; the labels describe the build", *registry_)) {
  build_info_
      .Add({{"version", build_info.version},
            {"torch_version", build_info.torch_version},
            {"device", build_info.device}})
      .Set(1);
}

StatsAggregator* Metrics::Find(const std::string& model, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = aggregators_[{model, version}];
  if (!slot) slot = std::make_unique<StatsAggregator>(model, version);
  return slot.get();
}

StatsAggregator* Metrics::ForModel(const std::string& model) { return Find(model, ""); }

StatsAggregator* Metrics::ForVersion(const std::string& model, const std::string& version) {
  ForModel(model);  // the model's series exist from its first version on, as its requests' do
  return Find(model, version);
}

const StatsAggregator* Metrics::StatsFor(const std::string& model,
                                         const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = aggregators_.find({model, version});
  return it == aggregators_.end() ? nullptr : it->second.get();
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
  std::vector<const StatsAggregator*> aggregators;
  std::vector<std::function<std::vector<prometheus::MetricFamily>()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, aggregator] : aggregators_) aggregators.push_back(aggregator.get());
    collectors = collectors_;
  }
  for (auto& family : ExportStats(aggregators)) families.push_back(std::move(family));
  for (const auto& collect : collectors) {
    for (auto& family : collect()) families.push_back(std::move(family));
  }
  for (auto& family : CollectProcessMetrics()) families.push_back(std::move(family));
  return families;
}

void Metrics::AddCollector(std::function<std::vector<prometheus::MetricFamily>()> collect) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collect));
}

std::string Metrics::Serialize() const { return prometheus::TextSerializer().Serialize(Collect()); }

}  // namespace mha::serve
