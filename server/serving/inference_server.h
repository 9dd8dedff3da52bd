// What a front end needs of the serving core: Infer, the models, and counting what it refused
// itself. ServerCore implements it; front-end tests use a fake.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mha/head_analysis.h"
#include "server/serving/inference.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {

// One model version's statistics (Triton's ModelStatistics), since the server started.
struct VersionStatistics {
  std::string name, version;
  int64_t inference_count = 0, execution_count = 0, success_count = 0, failure_count = 0;
  int64_t queue_ns = 0, compute_ns = 0;
  int64_t last_inference_ms = 0;  // Unix time; 0 = none yet
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
  virtual void RecordOutcome(const std::optional<std::string>& model, const Status& status,
                             Clock::time_point start, Protocol protocol) = 0;
  // The models as they are now; never null.
  virtual std::shared_ptr<const ModelRepository> repository() const = 0;
  // Per version: name "" = every model, version "" = every version of it. NOT_FOUND for an
  // unknown name or version.
  virtual StatusOr<std::vector<VersionStatistics>> Statistics(const std::string& name,
                                                              const std::string& version) {
    return Unimplemented("this server keeps no statistics");
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
};

}  // namespace mha::serve
