// What a front end needs of the serving core: Infer, the models, and counting what it refused
// itself. ServerCore implements it; front-end tests use a fake.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mha/head_analysis.h"
#include "server/serving/inference.h"
#include "server/serving/layer_step.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

// One model version's statistics since the server started: its aggregator read once
// (stats_aggregator.h); mha.v1, the Open Inference Protocol and REST each format these.
struct VersionStatistics {
  std::string name, version;
  StatsSnapshot stats;  // zeros when the version never had any
};

// How a served version is scheduled: its handle's effective options (the server's flags with the
// model's config.json on top, computed once when the version is published).
struct SchedulerView {
  bool batching = true;
  int instances = 1;
  int64_t max_batch_rows = 0, max_batch_tokens = 0;
  int64_t max_queue_delay_us = 0;
  int64_t max_queue_size = 0;
};

// AnalyzeModel's answer: the version that answered and its head analysis (shared, cached).
struct ModelAnalysisResult {
  std::string model, model_version;
  std::shared_ptr<const HeadAnalysis> analysis;
};

class InferenceServer {
 public:
  virtual ~InferenceServer() = default;

  // Validates once and runs `request`; `done` is called exactly once (see InferDone).
  virtual void Infer(InferenceRequest request, InferDone done) = 0;
  // The outcome of a request that the front end counts itself: one it refused before Infer, or
  // one sent with count_outcome = false (a stream counts only what it answers). `model` as
  // requested
  // ("" = the default model); nullopt when the request could not even be read ("unknown").
  virtual void CountRequest(const std::optional<std::string>& model, const Status& status,
                            Clock::time_point start, Protocol protocol) = 0;
  // The models as they are now; never null.
  virtual std::shared_ptr<const ModelRepository> repository() const = 0;
  // Per version, one rule for every protocol: name "" = every READY version (of `version` when
  // it is not ""); a name = its versions (any state), or the one `version`. NOT_FOUND (as
  // Resolve words it) for an unknown name or version.
  virtual StatusOr<std::vector<VersionStatistics>> Statistics(const std::string& name,
                                                              const std::string& version) {
    return Unimplemented("this server keeps no statistics");
  }
  // The scheduling of a served (READY) version; nullopt when it is not being served.
  virtual std::optional<SchedulerView> Scheduling(const std::string& name,
                                                  const std::string& version) const {
    return std::nullopt;
  }
  // The head analysis of one loaded version (mha/head_analysis.h), computed on first use and
  // cached for the version's lifetime. NOT_FOUND / UNAVAILABLE as Infer.
  virtual StatusOr<ModelAnalysisResult> Analyze(const std::string& name,
                                                const std::string& version) {
    return Unimplemented("this server has no model analysis");
  }
  // Decoding sessions (docs/sessions.md). A cross-attention session's key/value are projected
  // on the calling thread.
  virtual StatusOr<OpenSessionResponse> OpenSession(const OpenSessionRequest& request) {
    return Unimplemented("this server has no decoding sessions");
  }
  virtual StatusOr<CloseSessionResponse> CloseSession(const std::string& session_id) {
    return Unimplemented("this server has no decoding sessions");
  }
  // A new session sharing the first tokens of another (copy-on-write KV blocks); a session's
  // rewind. Both refused while a step of the session is queued or running.
  virtual StatusOr<ForkSessionResponse> ForkSession(const ForkSessionRequest& request) {
    return Unimplemented("this server has no decoding sessions");
  }
  // A restore or a spill blocks `caller` (caller_thread.h).
  virtual StatusOr<TruncateSessionResponse> TruncateSession(const std::string& session_id,
                                                            int64_t tokens,
                                                            CallerThread caller = CallerThread()) {
    return Unimplemented("this server has no decoding sessions");
  }
  // One message of the per-layer step exchange (mha.v1 LayerSteps, docs/afd.md): validated
  // once, then run in a pass of its layer; `done` is called exactly once (see LayerStepDone). The
  // message's outcome is counted here, not by the front end.
  virtual void StepLayer(LayerStepRequest request, LayerStepDone done) {
    LayerStepResponse response;
    response.status = Unimplemented("this server has no layer steps");
    done(std::move(response));
  }
};

}  // namespace mha::serve
