#include "serving_runtime.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <utility>

namespace mha::serve {

BatcherOptions BatcherDefaults(const ServerConfig& c) {
  BatcherOptions o;
  o.max_batch_rows = c.max_batch_rows;
  o.max_batch_tokens = c.max_batch_tokens;
  o.max_queue_delay_us = c.max_queue_delay_us;
  o.max_queue_size = static_cast<size_t>(c.max_queue_size);
  o.instances = c.instances;
  return o;
}

ServingRuntime::ServingRuntime(const ServerConfig& config)
    : config_(config), metrics_(CurrentBuildInfo()) {
  ModelRunner* inner = nullptr;
  if (config_.batching) {
    batching_ = std::make_unique<BatchingRunner>(BatcherDefaults(config_), &metrics_);
    inner = batching_.get();
    spdlog::info(
        "dynamic batching on: max_batch_rows={} max_batch_tokens={} max_queue_delay_us={} "
        "instances={} (config.json keys max_batch_size, max_batch_tokens, max_queue_delay_us, "
        "max_queue_size, instances override per model)",
        config_.max_batch_rows, config_.max_batch_tokens, config_.max_queue_delay_us,
        config_.instances);
  } else {
    DirectRunnerOptions o;
    o.workers = config_.ResolvedWorkers();
    o.max_queue_size = static_cast<size_t>(config_.max_queue_size);
    direct_ = std::make_unique<DirectRunner>(o);
    inner = direct_.get();
    spdlog::info("dynamic batching off: one forward pass per request");
  }
  instrumented_ = std::make_unique<InstrumentedRunner>(inner, &metrics_,
                                                       /*records_batches=*/config_.batching);
}

ServingRuntime::~ServingRuntime() {
  ShutdownRunner();
  StopHttp();
}

Status ServingRuntime::StartHttp() {
  if (config_.metrics_address.empty()) {
    spdlog::info("metrics endpoint off (--metrics-address is empty)");
    return Status::Ok();
  }
  auto http = std::make_unique<MetricsHttpServer>(&metrics_, [this] { return ready_.load(); });
  MHA_RETURN_IF_ERROR(http->Start(config_.metrics_address));
  http_ = std::move(http);
  spdlog::info("metrics on http://{} (port {}): /metrics /healthz /readyz", config_.metrics_address,
               http_->port());
  return Status::Ok();
}

void ServingRuntime::OnModelsLoaded(const ModelRepository& repository) {
  for (const auto& entry : repository.entries()) {
    if (entry->state == ModelState::kLoading) continue;  // not attempted (stopping)
    metrics_.SetModelLoaded(entry->name, entry->state == ModelState::kReady);
    if (!batching_ || entry->state != ModelState::kReady) continue;
    std::string config_json;
    if (entry->format != "builtin" && !entry->source.empty()) {
      config_json = (std::filesystem::path(entry->source).parent_path() / "config.json").string();
    }
    auto options = ReadBatcherConfig(config_json, BatcherDefaults(config_));
    if (!options.ok()) {
      spdlog::error("model {}: {}; using the server's batching flags", entry->name,
                    options.status().message());
      options = BatcherDefaults(config_);
    }
    const BatcherOptions& o = *options;
    spdlog::info("model {} batcher: rows={} tokens={} delay_us={} queue={} instances={}",
                 entry->name, o.max_batch_rows, o.max_batch_tokens, o.max_queue_delay_us,
                 o.max_queue_size, o.instances);
    batching_->AddModel(entry->name, entry->model, o);
  }
}

void ServingRuntime::ShutdownRunner() { instrumented_->Shutdown(); }

void ServingRuntime::StopHttp() {
  if (http_) http_->Stop();
}

}  // namespace mha::serve
