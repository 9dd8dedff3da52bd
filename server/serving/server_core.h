// ServerCore: the serving core without a wire protocol (TF Serving's ServerCore, Triton's
// in-process server API). It owns the model repository (versioned entries with their lifetimes),
// one scheduler per model handle, and the metrics; front ends call Infer and read the repository
// snapshot, and only translate between their wire format and these types.
//
//   front end --InferenceRequest--> ServerCore::Infer --validate once--> ModelHandle::scheduler
//   (DynamicBatcher, batching on or off) --MhaModel::ForwardValidated-->
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
#include "server/serving/model_controller.h"
#include "server/serving/observability/metrics.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/scheduling/dynamic_batcher.h"
#include "server/serving/sessions/session_store.h"

namespace mha::serve {

struct ServerCoreOptions {
  std::string model_repository;  // "" = the built-in default model
  std::string default_model;
  LoadOverrides overrides;  // --dtype / --device over every config.json
  RequestLimits limits;
  bool batching = true;    // false: the same scheduler, one request per pass
  BatcherOptions batcher;  // server-wide; config.json keys override them per model
  // Batching off: instances (worker threads) per model. 1: OpenBLAS threads each GEMM over every
  // core; measured on 2 cores, B=8 T=128: 2 workers = 26 req/s, 1 worker = 37 req/s.
  int workers = 1;
  int load_threads = 0;                // models loaded at once; 0 = min(cores, 4)
  int64_t debug_forward_delay_ms = 0;  // test-only: each pass first sleeps this long
  ModelControlMode model_control = ModelControlMode::kNone;
  std::vector<std::string> startup_models;         // explicit mode: loaded at start (empty = all)
  std::chrono::milliseconds poll_interval{15000};  // poll mode: between repository scans
  SessionOptions sessions;  // decoding sessions: KV cache pool per model version, timeouts
};

// One loaded model version as requests reach it: the repository entry, its scheduler and its
// metrics (looked up once). Shared: in-flight requests hold it; when the last holder lets go the
// scheduler drains (every accepted task is answered) and its threads end, so a swapped-out
// version is removed without leaking a scheduler.
struct ModelHandle {
  std::shared_ptr<const ModelEntry> entry;
  std::unique_ptr<ModelRunner> scheduler;  // null unless READY
  ModelMetrics* metrics = nullptr;
  // AnalyzeModel's answer, computed once on first use (server_core_analysis.cc).
  std::once_flag analysis_once;
  std::shared_ptr<const HeadAnalysis> analysis;
  Status analysis_status;
  // The version's decoding sessions; they end with the handle (declared after the scheduler, so
  // destroyed before it).
  std::unique_ptr<SessionStore> sessions;
  ~ModelHandle();
};

// Logs a version's outcome (READY with its shapes, or FAILED with the error).
void LogModel(const ModelEntry& entry, bool is_default);

// The batcher settings of one model: its config.json keys over the server's flags.
BatcherOptions BatcherOptionsFor(const ModelConfig& config, const BatcherOptions& defaults);
// The scheduler of one model as it runs: with batching, BatcherOptionsFor; without, the same
// scheduler with one request per pass on `workers` instances (config.json's max_queue_size still
// applies).
BatcherOptions SchedulerOptionsFor(const ModelConfig& config, bool batching,
                                   const BatcherOptions& defaults, int workers);

// Lifecycle (server_core_lifecycle.cc): one lifecycle thread runs every load, reload and unload
// after the start-up load, one at a time, so the published State has a single writer. A new or
// changed version loads (and warms up) beside the serving ones; routing switches when it is READY;
// the replaced handles are retired: shown UNLOADING until the requests holding them are answered,
// then destroyed on the lifecycle thread (never on a scheduler's own worker).
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

  // A request a front end refused before Infer (undecodable message, too big): counted in
  // mha_requests_total like the others. `model` is the name the request gave.
  void RecordOutcome(const std::optional<std::string>& model, const Status& status,
                     Clock::time_point start, Protocol protocol) override;

  // The models as they are now (LOADING entries while loading). Never null after Create.
  std::shared_ptr<const ModelRepository> repository() const override;
  StatusOr<std::vector<VersionStatistics>> Statistics(const std::string& name,
                                                      const std::string& version) override;
  StatusOr<ModelAnalysisResult> Analyze(const std::string& name,
                                        const std::string& version) override;
  Metrics* metrics() { return &metrics_; }
  const ServerCoreOptions& options() const { return options_; }

  void LoadModel(const std::string& name, Callback done) override;
  void UnloadModel(const std::string& name, Callback done) override;
  StatusOr<std::vector<IndexEntry>> RepositoryIndex() const override;

  // Stops loading, refuses new requests (UNAVAILABLE), completes every accepted one and joins the
  // schedulers' threads. Idempotent.
  void Stop();

 private:
  using VersionKey = std::pair<std::string, std::string>;  // name, version
  using HandleMap = std::map<VersionKey, std::shared_ptr<ModelHandle>>;
  struct State {
    std::shared_ptr<const ModelRepository> repository;
    HandleMap handles;  // READY versions only
  };
  explicit ServerCore(const ServerCoreOptions& options);
  std::shared_ptr<const State> Current() const;
  void Publish(std::shared_ptr<const State> state);
  void LoadAll(std::vector<ModelEntry> entries, std::function<void()> on_done);
  std::shared_ptr<ModelHandle> MakeHandle(ModelEntry entry);
  // Loads one LOADING entry and runs its warmup passes: READY or FAILED.
  void LoadAndWarm(ModelEntry* entry);

  // Lifecycle thread (server_core_lifecycle.cc).
  void LifecycleLoop();
  void Enqueue(std::function<void()> op, const Callback& refused);
  // Rescans `name` and loads what is new or changed beside what serves (see PlanReload).
  Status ReloadModel(const std::string& name, bool retry_failed);
  Status FinishReload(const std::string& name, std::vector<ModelRepository::EntryPtr> entries,
                      HandleMap handles, std::vector<ModelEntry> loaded,
                      std::vector<ModelEntry> failed, HandleMap old_handles);
  Status Unload(const std::string& name);
  void PollRepository();
  // Replaces `name`'s entries and handles in the published state.
  void PublishModel(const std::string& name, std::vector<ModelRepository::EntryPtr> entries,
                    HandleMap handles);
  // Publishes `name` with `retired` shown UNLOADING beside `entries`, waits until no request
  // holds them, destroys them, publishes `entries` alone.
  void RetireAndDrain(const std::string& name, std::vector<ModelRepository::EntryPtr> entries,
                      HandleMap handles, std::vector<std::shared_ptr<ModelHandle>> retired);
  Status ControlAllowed(bool loads) const;
  Status Validate(const ModelHandle& handle, const InferenceRequest& request) const;
  // Infer for a request with a session_id: to the session's version and its SessionStore.
  void InferStep(InferenceRequest request, InferDone done);
  // The handle a session lives on, or NOT_FOUND naming why it is gone.
  StatusOr<std::shared_ptr<ModelHandle>> SessionHandle(const std::string& session_id);
  ModelMetrics* MetricsFor(const State* state, const std::string& requested);

  const ServerCoreOptions options_;
  Metrics metrics_;
  // Before state_: the handles' session stores write tombstones here when they end.
  std::shared_ptr<SessionDirectory> session_directory_ = std::make_shared<SessionDirectory>();
  mutable std::mutex mu_;
  std::shared_ptr<const State> state_;
  std::atomic<bool> stopping_{false};
  std::thread loader_;  // the start-up load, then the lifecycle loop
  std::mutex ops_mu_;
  std::condition_variable ops_cv_;
  std::deque<std::function<void()>> ops_;              // guarded by ops_mu_
  std::vector<std::shared_ptr<ModelHandle>> retired_;  // lifecycle thread only (and Stop)
};

}  // namespace mha::serve
