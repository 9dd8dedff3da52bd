// What sits between the handlers and the models for one server run: the ModelRunner (a
// BatchingRunner with one DynamicBatcher per model when --batching is on, else the DirectRunner),
// wrapped by InstrumentedRunner for the per-request metrics; the Metrics registry; and the
// metrics/health HTTP endpoint on --metrics-address. server_app owns one and drives its life cycle.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "batching_runner.h"
#include "config.h"
#include "direct_runner.h"
#include "instrumented_runner.h"
#include "metrics.h"
#include "metrics_http.h"
#include "model_repository.h"

namespace mha::serve {

// Server-wide batching defaults from the flags.
BatcherOptions BatcherDefaults(const ServerConfig& config);

class ServingRuntime {
 public:
  explicit ServingRuntime(const ServerConfig& config);
  ~ServingRuntime();

  // Starts the HTTP endpoint (unless --metrics-address is empty). UNAVAILABLE when the address
  // cannot be bound.
  Status StartHttp();
  int metrics_port() const { return http_ ? http_->port() : 0; }

  // What the service submits to.
  ModelRunner* runner() { return instrumented_.get(); }
  Metrics* metrics() { return &metrics_; }

  // After loading: mha_model_loaded per model and, with batching, each READY model's batcher
  // with its config.json settings (a bad key is logged and the flags' values are used).
  void OnModelsLoaded(const ModelRepository& repository);
  // /readyz: true once SERVING, false again when stopping.
  void SetReady(bool ready) { ready_ = ready; }

  // Completes accepted tasks and joins the workers (the HTTP endpoint keeps answering).
  void ShutdownRunner();
  void StopHttp();

 private:
  const ServerConfig config_;
  Metrics metrics_;
  std::unique_ptr<DirectRunner> direct_;
  std::unique_ptr<BatchingRunner> batching_;
  std::unique_ptr<InstrumentedRunner> instrumented_;
  std::unique_ptr<MetricsHttpServer> http_;
  std::atomic<bool> ready_{false};
};

}  // namespace mha::serve
