#include "attention_service.h"

#include <utility>

#include "forward_stream.h"
#include "metrics.h"
#include "status_convert.h"

namespace mha::serve {
namespace {

void FinishCall(grpc::ServerUnaryReactor* reactor, const RequestLog& log, const Status& status,
                const std::string& detail = "") {
  LogOutcome(log, status, detail);
  reactor->Finish(codec::ToGrpcStatus(status));
}

}  // namespace

std::string MetricsModelName(const ModelRepository* repository, const std::string& requested) {
  if (repository) {
    auto entry = repository->Find(requested.empty() ? repository->default_name() : requested);
    if (entry) return entry->name;
  }
  return "unknown";
}

void AttentionServiceImpl::RecordForward(const std::string& model, const Status& status,
                                         Clock::time_point start) const {
  if (!options_.metrics) return;
  options_.metrics->RecordRequest(model, status.code(), MicrosBetween(start, Clock::now()) * 1e-6);
}

InferenceTask MakeTask(PreparedForward prepared, grpc::CallbackServerContext* context,
                       const RequestLog& log) {
  InferenceTask task;
  task.model = prepared.entry->model;
  task.model_name = prepared.entry->name;
  task.inputs = std::move(prepared.inputs);
  task.deadline = SteadyDeadline(context);
  task.is_cancelled = [context] { return context->IsCancelled(); };
  task.request_id = log.request_id;
  task.enqueue_time = Clock::now();
  return task;
}

AttentionServiceImpl::AttentionServiceImpl(ModelRunner* runner, ServiceOptions options)
    : runner_(runner), options_(options) {}

void AttentionServiceImpl::Publish(std::shared_ptr<const ModelRepository> repository) {
  std::lock_guard<std::mutex> lock(mu_);
  repository_ = std::move(repository);
}

std::shared_ptr<const ModelRepository> AttentionServiceImpl::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return repository_;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::Forward(grpc::CallbackServerContext* context,
                                                        const v1::ForwardRequest* request,
                                                        v1::ForwardResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "Forward");
  auto repository = Snapshot();
  // The request outlives the task (the call is open until `done`): its tensors are borrowed.
  auto prepared = PrepareForward(*request, repository.get(), options_.limits, /*borrow=*/true);
  if (!prepared.ok()) {
    RecordForward(MetricsModelName(repository.get(), request->model()), prepared.status(),
                  log.start);
    FinishCall(reactor, log, prepared.status());
    return reactor;
  }
  ResponseSpec spec = MakeResponseSpec(*prepared);
  InferenceTask task = MakeTask(std::move(prepared.value()), context, log);
  // `done` runs on a runner worker (or inline when refused); the call stays open until then.
  runner_->Submit(std::move(task), [this, reactor, response, log = std::move(log),
                                    spec = std::move(spec)](InferenceResult result) {
    const Status status = BuildResponse(result, spec, response);
    RecordForward(spec.model, status, log.start);
    FinishCall(reactor, log, status,
               "model=" + spec.model + " queue_us=" + std::to_string(result.queue_us) +
                   " compute_us=" + std::to_string(result.compute_us));
  });
  return reactor;
}

grpc::ServerBidiReactor<v1::ForwardRequest, v1::ForwardResponse>*
AttentionServiceImpl::ForwardStream(grpc::CallbackServerContext* context) {
  return new ForwardStreamReactor(this, context);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                           const v1::ListModelsRequest* request,
                                                           v1::ListModelsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ListModels");
  auto repository = Snapshot();
  if (!repository) {
    FinishCall(reactor, log, Unavailable("models are still loading"));
    return reactor;
  }
  response->set_default_model(repository->default_name());
  for (const auto& entry : repository->entries()) {
    FillModelInfo(*entry, entry->name == repository->default_name(), response->add_models());
  }
  FinishCall(reactor, log, Status::Ok());
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                         const v1::GetModelRequest* request,
                                                         v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "GetModel");
  auto repository = Snapshot();
  if (!repository) {
    FinishCall(reactor, log, Unavailable("models are still loading"));
    return reactor;
  }
  auto entry = repository->Find(request->name());
  if (!entry) {
    // Resolve words the NOT_FOUND (unknown name, or no default model) and lists the names.
    auto resolved = repository->Resolve(request->name());
    FinishCall(
        reactor, log,
        resolved.ok() ? NotFound("model '" + request->name() + "' not found") : resolved.status());
    return reactor;
  }
  FillModelInfo(*entry, entry->name == repository->default_name(), response);
  FinishCall(reactor, log, Status::Ok());
  return reactor;
}

}  // namespace mha::serve
