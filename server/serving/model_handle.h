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
#include "server/serving/kinds/model_kind.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

// One loaded model version as requests reach it: the repository entry, its serving side (its
// kind's ServedModel: scheduler, sessions, steps) and its metrics (looked up once). Shared:
// in-flight requests hold it; when the last holder lets go the serving side ends (its sessions
// end, its schedulers answer every accepted task and their threads end), so a swapped-out version
// is removed without leaking a scheduler.
struct ModelHandle {
  std::shared_ptr<const ModelEntry> entry;
  StatsAggregator* metrics = nullptr;
  // AnalyzeModel's answer, computed once on first use (server_core_analysis.cc).
  std::once_flag analysis_once;
  std::shared_ptr<const HeadAnalysis> analysis;
  Status analysis_status;
  // Null unless READY. Last: destroyed first.
  std::unique_ptr<ServedModel> served;
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
