// ServerCore: the serving core without a wire protocol (TF Serving's ServerCore, Triton's
// in-process server API). It owns the model repository (versioned entries with their lifetimes),
// one serving side per model handle (its kind's ServedModel, kinds/model_kind.h), and the metrics;
// front ends call Infer and read the repository snapshot, and only translate between their wire
// format and these types. The core never names a model kind.
//
//   front end --InferenceRequest--> ServerCore::Infer --ServedModel::ValidateForward (once)-->
//   ServedModel::Submit (its scheduler: WorkQueue + planner) --the kind's pass-->
//   InferDone(InferenceResponse)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/serving/inference.h"
#include "server/serving/inference_server.h"
#include "server/serving/kinds/serve_options.h"
#include "server/serving/lifecycle/model_lifecycle.h"
#include "server/serving/model_controller.h"
#include "server/serving/model_handle.h"
#include "server/serving/observability/metrics.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/server_core_options.h"
#include "server/serving/sessions/session_directory.h"

namespace mha::serve {

// The serving core: a thin façade over the model lifecycle (lifecycle/model_lifecycle.h: loads,
// reloads, polls, retires; it publishes the ServingState) and the router (Infer: resolve, validate
// once, submit to the version's scheduler, complete; server_core_internal.h), decoding sessions
// (server_core_sessions.cc), statistics and analysis. It makes each version's handle (statistics
// aggregator, the kind's serving side) for the lifecycle.
class ServerCore final : public InferenceServer, public ModelController {
 public:
  // Scans the repository (nothing is loaded yet: every model is LOADING or FAILED). Errors: the
  // repository is not a folder or holds no model, an unknown --default-model or --load-model.
  static StatusOr<std::unique_ptr<ServerCore>> Create(const ServerCoreOptions& options);
  ~ServerCore() override;

  // Loads every LOADING model on background threads (load_threads at a time), then publishes
  // the result and calls `on_done` (on a loader thread). Models still waiting when Stop() is
  // called are left LOADING.
  void StartLoading(std::function<void()> on_done);

  // Validates `request` once (model, shapes, limits) and hands it to the model's scheduler;
  // `done` gets the outcome. Metrics: one request outcome per call, inflight, queue and compute.
  void Infer(InferenceRequest request, InferDone done) override;

  // Decoding sessions (docs/sessions.md; server_core_sessions.cc). OpenSession validates against
  // the model and the limits (batch_size <= --max-batch-size, max_tokens <=
  // --max-sequence-length); CloseSession gives the session's KV blocks back.
  StatusOr<OpenSessionResponse> OpenSession(const OpenSessionRequest& request) override;
  StatusOr<CloseSessionResponse> CloseSession(const std::string& session_id) override;
  StatusOr<ForkSessionResponse> ForkSession(const ForkSessionRequest& request) override;
  StatusOr<TruncateSessionResponse> TruncateSession(const std::string& session_id, int64_t tokens,
                                                    CallerThread caller = CallerThread()) override;
  // A layer step message (server_core_layers.cc): the version is its sessions'; its kind runs it.
  void StepLayer(LayerStepRequest request, LayerStepDone done) override;

  // A request a front end refused before Infer (undecodable message, too big): counted in
  // mha_requests_total like the others. `model` is the name the request gave.
  void CountRequest(const std::optional<std::string>& model, const Status& status,
                    Clock::time_point start, Protocol protocol) override;

  // The models as they are now (LOADING entries while loading). Never null after Create.
  std::shared_ptr<const ModelRepository> repository() const override;
  StatusOr<std::vector<VersionStatistics>> Statistics(const std::string& name,
                                                      const std::string& version) override;
  std::optional<SchedulerView> Scheduling(const std::string& name,
                                          const std::string& version) const override;
  StatusOr<ModelAnalysisResult> Analyze(const std::string& name,
                                        const std::string& version) override;
  // Head analyses computed so far (each version's first Analyze): a cached answer leaves it.
  int64_t analyses_computed() const { return analyses_computed_.load(); }
  Metrics* metrics() { return &metrics_; }
  const ServerCoreOptions& options() const { return options_; }

  // Model control: the lifecycle's (LoadModel/UnloadModel run on its thread).
  void LoadModel(const std::string& name, Callback done) override {
    lifecycle_->LoadModel(name, std::move(done));
  }
  void UnloadModel(const std::string& name, Callback done) override {
    lifecycle_->UnloadModel(name, std::move(done));
  }
  StatusOr<std::vector<IndexEntry>> RepositoryIndex() const override {
    return lifecycle_->RepositoryIndex();
  }

  // Stops loading, refuses new requests (UNAVAILABLE), completes every accepted one and joins the
  // schedulers' threads. Idempotent.
  void Stop();
  // With the shared KV store (a drain, before Stop): every session written whole and released,
  // until `deadline` (steps still running finish first; new ones are refused UNAVAILABLE and
  // retried elsewhere). The sessions released.
  int64_t HandOverSessions(std::chrono::steady_clock::time_point deadline);
  bool kv_store_on() const { return options_.sessions.kv_tier != nullptr; }

 private:
  explicit ServerCore(const ServerCoreOptions& options);
  std::shared_ptr<const ServingState> Current() const { return lifecycle_->Current(); }
  // The handle of a version the lifecycle loaded: its aggregator and its kind's serving side.
  std::shared_ptr<ModelHandle> MakeHandle(ModelEntry entry);
  // Infer for a request with a session_id: to the session's version and its session steps.
  void InferStep(InferenceRequest request, InferDone done);
  // The sessions of `handle`'s version, or its refusal (`field` prefixes it: NotOffered).
  static StatusOr<Sessions*> SessionsOf(const ModelHandle& handle, const std::string& field);
  // The handle a session lives on (restored from the shared KV store when it is not here and the
  // store has it: AdoptSession; a restore blocks `caller`), or NOT_FOUND naming why it is gone.
  StatusOr<std::shared_ptr<ModelHandle>> SessionHandle(const std::string& session_id,
                                                       CallerThread* caller = nullptr);
  // Session `id` (not open here: `gone`) restored from the shared KV store by the version its
  // record names; `gone` when there is no store or no record.
  Status AdoptSession(const std::string& id, const Status& gone, CallerThread* caller);
  // The handle of a step message's sessions (every entry's on one version), or why not.
  StatusOr<std::shared_ptr<ModelHandle>> LayerStepHandle(const LayerStepRequest& request);
  StatsAggregator* MetricsFor(const ServingState* state, const std::string& requested);

  const ServerCoreOptions options_;
  Metrics metrics_;
  // Before the lifecycle: the handles' session stores write tombstones here when they end.
  std::shared_ptr<SessionDirectory> session_directory_ = std::make_shared<SessionDirectory>();
  std::atomic<bool> stopping_{false};
  std::atomic<bool> handing_over_{false};  // HandOverSessions began: nothing is restored here
  std::atomic<int64_t> analyses_computed_{0};
  std::unique_ptr<ModelLifecycle> lifecycle_;  // last: its handles use the members above
};

}  // namespace mha::serve
