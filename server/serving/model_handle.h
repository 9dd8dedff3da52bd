// One loaded model version as the serving core routes to it (server_core.h) and the lifecycle
// publishes it (lifecycle/model_lifecycle.h).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "mha/head_analysis.h"
#include "server/serving/inference_server.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/scheduling/runner.h"
#include "server/serving/sessions/session_store.h"

namespace mha::serve {

struct LlamaHandle;  // llama/llama_handle.h

// One loaded model version as requests reach it: the repository entry, its scheduler and its
// metrics (looked up once). Shared: in-flight requests hold it; when the last holder lets go the
// scheduler drains (every accepted task is answered) and its threads end, so a swapped-out
// version is removed without leaking a scheduler.
struct ModelHandle {
  std::shared_ptr<const ModelEntry> entry;
  std::unique_ptr<ModelRunner> scheduler;  // null unless READY
  SchedulerView scheduling;                // the scheduler's effective options
  StatsAggregator* metrics = nullptr;
  // AnalyzeModel's answer, computed once on first use (server_core_analysis.cc).
  std::once_flag analysis_once;
  std::shared_ptr<const HeadAnalysis> analysis;
  Status analysis_status;
  // The version's decoding sessions; they end with the handle (declared after the scheduler, so
  // destroyed before it).
  std::unique_ptr<SessionStore> sessions;
  // A Llama-family stack (docs/afd.md): its sessions and layer-step scheduler (`sessions` is
  // null). Last: destroyed first.
  std::shared_ptr<LlamaHandle> llama;
  ~ModelHandle();
};

using VersionKey = std::pair<std::string, std::string>;  // name, version
using HandleMap = std::map<VersionKey, std::shared_ptr<ModelHandle>>;

// What requests are routed by: the repository snapshot and a handle per READY version. Immutable
// once published; the lifecycle publishes a new one for every change.
struct ServingState {
  std::shared_ptr<const ModelRepository> repository;
  HandleMap handles;  // READY versions only
};

}  // namespace mha::serve
