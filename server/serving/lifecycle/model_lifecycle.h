// The model lifecycle (TF Serving's AspiredVersionsManager, Triton's ModelLifeCycle), apart from
// routing: it publishes the ServingState requests are routed by, runs the start-up load (load
// threads), then one lifecycle thread that runs every later load, reload, unload and repository
// poll, one at a time, so the published state has a single writer. A new or changed version loads
// (and warms up) beside the serving ones; routing switches when it is READY; the replaced handles
// are retired: shown UNLOADING until the requests holding them are answered, then destroyed on the
// lifecycle thread (never on a scheduler's own worker). Handles are made by the serving core
// (HandleFactory): the lifecycle never knows about schedulers, sessions or requests.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/serving/model_handle.h"
#include "server/serving/observability/metrics.h"
#include "server/serving/server_core_options.h"

namespace mha::serve {

using HandleFactory = std::function<std::shared_ptr<ModelHandle>(ModelEntry)>;

// Logs a version's outcome (READY with its shapes, or FAILED with the error).
void LogModel(const ModelEntry& entry, bool is_default);

class ModelLifecycle final : public ModelController {
 public:
  // Publishes `initial` (every model LOADING or FAILED); nothing loads yet.
  ModelLifecycle(const ServerCoreOptions& options, Metrics* metrics, HandleFactory make_handle,
                 std::shared_ptr<const ModelRepository> initial);
  ~ModelLifecycle() override;

  // The state requests are routed by now. Never null.
  std::shared_ptr<const ServingState> Current() const;
  // Loads every LOADING model on background threads (load_threads at a time), publishes the
  // result and calls `on_done` (on a loader thread), then runs the lifecycle loop.
  void StartLoading(std::function<void()> on_done);

  void LoadModel(const std::string& name, Callback done) override;
  void UnloadModel(const std::string& name, Callback done) override;
  StatusOr<std::vector<IndexEntry>> RepositoryIndex() const override;

  // Stops loading, answers queued operations UNAVAILABLE, joins the lifecycle thread and shuts
  // every scheduler down (each completes the tasks it accepted). Idempotent.
  void Stop();

 private:
  void Publish(std::shared_ptr<const ServingState> state);
  void LoadAll(std::vector<ModelEntry> entries, std::function<void()> on_done);
  // Loads one LOADING entry and runs its warmup passes: READY or FAILED.
  void LoadAndWarm(ModelEntry* entry);
  void LifecycleLoop();
  void Enqueue(std::function<void()> op, const Callback& refused);
  Status ControlAllowed(bool loads) const;
  // Rescans `name` and loads what is new or changed beside what serves (reload.cc).
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

  const ServerCoreOptions& options_;  // the serving core's, which outlives this object
  Metrics* const metrics_;
  const HandleFactory make_handle_;
  mutable std::mutex mu_;
  std::shared_ptr<const ServingState> state_;
  std::atomic<bool> stopping_{false};
  std::thread loader_;  // the start-up load, then the lifecycle loop
  std::mutex ops_mu_;
  std::condition_variable ops_cv_;
  std::deque<std::function<void()>> ops_;              // guarded by ops_mu_
  std::vector<std::shared_ptr<ModelHandle>> retired_;  // lifecycle thread only (and Stop)
};

}  // namespace mha::serve
