// mha.v1.AttentionService on gRPC's callback API. Handlers are thin: decode + validate
// (forward_request), submit to the ModelRunner, map the status (status_convert), respond. No
// handler blocks a gRPC thread: forward passes run on the runner's workers, which also finish
// the calls.
#pragma once

#include <memory>
#include <mutex>

#include "forward_request.h"
#include "mha/v1/attention.grpc.pb.h"
#include "model_repository.h"
#include "request_log.h"
#include "runner.h"

namespace mha::serve {

class Metrics;

struct ServiceOptions {
  RequestLimits limits;
  int stream_window = 4;       // requests of one ForwardStream submitted but not yet written
  Metrics* metrics = nullptr;  // forward requests' codes and durations; not owned, may be null
};

class AttentionServiceImpl final : public v1::AttentionService::CallbackService {
 public:
  AttentionServiceImpl(ModelRunner* runner, ServiceOptions options);

  // Makes a new set of models visible to the calls that start after it.
  void Publish(std::shared_ptr<const ModelRepository> repository);
  std::shared_ptr<const ModelRepository> Snapshot() const;

  ModelRunner* runner() const { return runner_; }
  const ServiceOptions& options() const { return options_; }
  // mha_requests_total{model,code} and mha_request_duration_seconds of one forward request (a
  // Forward call or one ForwardStream message) that started at `start`.
  void RecordForward(const std::string& model, const Status& status, Clock::time_point start) const;

  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const v1::ForwardRequest* request,
                                    v1::ForwardResponse* response) override;
  grpc::ServerBidiReactor<v1::ForwardRequest, v1::ForwardResponse>* ForwardStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::ModelInfo* response) override;

 private:
  ModelRunner* const runner_;
  const ServiceOptions options_;
  mutable std::mutex mu_;
  std::shared_ptr<const ModelRepository> repository_;  // null until loading starts
};

// The metrics label of a request that names `requested` ("" = the default model): the model's
// name when the repository knows it, else "unknown" (unknown names must not make new series).
std::string MetricsModelName(const ModelRepository* repository, const std::string& requested);

// The runner task for a prepared request of `context` (deadline, cancellation, request id).
InferenceTask MakeTask(PreparedForward prepared, grpc::CallbackServerContext* context,
                       const RequestLog& log);

}  // namespace mha::serve
