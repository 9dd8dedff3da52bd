#include "server/frontends/oip/inference_service.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "mha/text.h"
#include "proto/wire/status_convert.h"
#include "server/frontends/oip/infer_stream.h"
#include "server/frontends/oip/sequence.h"
#include "server/frontends/raw_call.h"
#include "server/serving/observability/metrics.h"

namespace mha::serve::oip {
namespace {

// The messages of one ModelInfer call; they live until it is answered (the decoded tensors
// borrow the request's bytes).
struct UnaryCall {
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
};

// Every model has finished loading and one of them is READY (what health SERVING means).
bool RepositoryReady(const ModelRepository& repository) {
  for (const auto& entry : repository.entries()) {
    if (entry->state == ModelState::kLoading) return false;
  }
  return repository.ready_count() > 0;
}

}  // namespace

StatusOr<std::shared_ptr<const ModelEntry>> ResolveVersion(const ModelRepository& repository,
                                                           const std::string& name,
                                                           const std::string& version) {
  return repository.Resolve(name, version);
}

StatusOr<InferCall> DecodeCall(const inference::ModelInferRequest& request,
                               const OipFrontendOptions& options, const InferenceServer& core,
                               grpc::CallbackServerContext* context, const RequestLog& log) {
  DecodeOptions decode;
  decode.max_message_bytes = options.max_message_bytes;
  decode.borrow = true;
  auto decoded = DecodeModelInferRequest(request, decode);
  if (!decoded.ok()) return decoded.status();
  decoded->request.start = log.start;
  decoded->request.deadline = SteadyDeadline(context);
  ApplyTimeout(&decoded.value());  // parameters.timeout, when it is sooner
  decoded->request.is_cancelled = [context] { return context->IsCancelled(); };
  decoded->request.request_id = log.request_id;
  return decoded;
}

GrpcInferenceServiceImpl::GrpcInferenceServiceImpl(InferenceServer* core,
                                                   OipFrontendOptions options)
    : core_(core), options_(std::move(options)) {}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ServerLive(
    grpc::CallbackServerContext* context, const inference::ServerLiveRequest* request,
    inference::ServerLiveResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ServerLive");
  response->set_live(true);  // answering at all is being live
  FinishCall(reactor, log, Status::Ok());
  return reactor;
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ServerReady");
  response->set_ready(options_.server_ready ? options_.server_ready()
                                            : RepositoryReady(*core_->repository()));
  FinishCall(reactor, log, Status::Ok());
  return reactor;
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ModelReady(
    grpc::CallbackServerContext* context, const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ModelReady");
  // Not ready (rather than an error) for unknown names, as Triton answers readiness probes.
  auto entry = ResolveVersion(*core_->repository(), request->name(), request->version());
  response->set_ready(entry.ok());
  FinishCall(reactor, log, Status::Ok());
  return reactor;
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ServerMetadata");
  response->set_name(kServerName);
  response->set_version(options_.server_version.empty() ? CurrentBuildInfo().version
                                                        : options_.server_version);
  response->add_extensions("model_configuration");
  if (options_.metrics != nullptr) response->add_extensions("statistics");
  response->add_extensions("sequence");
  FinishCall(reactor, log, Status::Ok());
  return reactor;
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ModelMetadata");
  auto entry = ResolveVersion(*core_->repository(), request->name(), request->version());
  if (entry.ok()) FillModelMetadata(*entry.value(), response);
  FinishCall(reactor, log, entry.status());
  return reactor;
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ModelInfer(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ModelInfer");
  auto call = std::make_shared<UnaryCall>();
  if (!ParseRawMessage(*request_bytes, &call->request)) {
    const Status status = InvalidArgument("request is not a valid inference.ModelInferRequest (" +
                                          std::to_string(request_bytes->Length()) + " bytes)");
    core_->RecordOutcome(std::nullopt, status, log.start, Protocol::kOip);
    FinishCall(reactor, log, status);
    return reactor;
  }
  auto decoded = DecodeCall(call->request, options_, *core_, context, log);
  if (!decoded.ok()) {
    core_->RecordOutcome(call->request.model_name(), decoded.status(), log.start, Protocol::kOip);
    FinishCall(reactor, log, decoded.status());
    return reactor;
  }
  InferCall& infer = decoded.value();
  if (const Status begun = BeginSequence(core_, &infer); !begun.ok()) {  // sequence.h
    core_->RecordOutcome(call->request.model_name(), begun, log.start, Protocol::kOip);
    FinishCall(reactor, log, begun);
    return reactor;
  }
  std::string session = infer.request.session_id;
  // `done` runs on a scheduler worker (or inline when refused); the call stays open until then.
  core_->Infer(
      std::move(infer.request),
      [reactor, response_bytes, call, outputs = std::move(infer.outputs), id = std::move(infer.id),
       log = std::move(log), core = core_, sequence = std::move(infer.sequence),
       session = std::move(session)](InferenceResponse result) {
        EndSequence(core, sequence, session, result.status);
        Status status = EncodeModelInferResponse(result, outputs, id, &call->response);
        if (status.ok()) status = SerializeRawMessage(call->response, response_bytes);
        FinishCall(reactor, log, status,
                   "model=" + result.model + " queue_us=" + std::to_string(result.queue_us) +
                       " compute_us=" + std::to_string(result.compute_us));
      });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
GrpcInferenceServiceImpl::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new InferStreamReactor(core_, options_, context);
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ModelConfig");
  auto entry = ResolveVersion(*core_->repository(), request->name(), request->version());
  if (entry.ok()) FillModelConfig(*entry.value(), options_.scheduling, response->mutable_config());
  FinishCall(reactor, log, entry.status());
  return reactor;
}

grpc::ServerUnaryReactor* GrpcInferenceServiceImpl::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "ModelStatistics");
  if (options_.metrics == nullptr) {
    FinishCall(reactor, log, Unimplemented("ModelStatistics: this server keeps no metrics"));
    return reactor;
  }
  const Status status = FillStatisticsResponse(*core_->repository(), *options_.metrics,
                                               request->name(), request->version(), response);
  FinishCall(reactor, log, status);
  return reactor;
}

}  // namespace mha::serve::oip
