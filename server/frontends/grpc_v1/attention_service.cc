#include "server/frontends/grpc_v1/attention_service.h"

#include <memory>
#include <utility>

#include "mha/text.h"
#include "proto/wire/status_convert.h"
#include "server/frontends/grpc_v1/forward_stream.h"
#include "server/frontends/grpc_v1/head_options.h"
#include "server/frontends/raw_call.h"

namespace mha::serve {
namespace {

struct UnaryCall {
  v1::ForwardRequest request;
  v1::ForwardResponse response;
};

}  // namespace

StatusOr<InferenceRequest> DecodeCall(const v1::ForwardRequest& request,
                                      const GrpcFrontendOptions& options, bool borrow,
                                      grpc::CallbackServerContext* context, const RequestLog& log) {
  MHA_RETURN_IF_ERROR(CheckSessionHeader(context, request.session_id()));
  auto decoded = DecodeForwardRequest(request, options.max_message_bytes, borrow);
  if (!decoded.ok()) return decoded.status();
  decoded->start = log.start;
  decoded->deadline = SteadyDeadline(context);
  decoded->is_cancelled = [context] { return context->IsCancelled(); };
  decoded->request_id = log.request_id;
  return decoded;
}

AttentionServiceImpl::AttentionServiceImpl(InferenceServer* core, GrpcFrontendOptions options)
    : core_(core), options_(options) {}

grpc::ServerUnaryReactor* AttentionServiceImpl::Forward(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request_bytes,
                                                        grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "Forward");
  // The messages live until the call is answered: the decoded tensors borrow the request's bytes.
  auto call = std::make_shared<UnaryCall>();
  if (!ParseRawMessage(*request_bytes, &call->request)) {
    const Status status = InvalidArgument("request is not a valid mha.v1.ForwardRequest (" +
                                          std::to_string(request_bytes->Length()) + " bytes)");
    core_->RecordOutcome(std::nullopt, status, log.start, Protocol::kNative);
    FinishCall(reactor, log, status);
    return reactor;
  }
  auto decoded = DecodeCall(call->request, options_, /*borrow=*/true, context, log);
  if (!decoded.ok()) {
    core_->RecordOutcome(call->request.model(), decoded.status(), log.start, Protocol::kNative);
    FinishCall(reactor, log, decoded.status());
    return reactor;
  }
  const bool need_weights = decoded->inputs.need_weights;
  // `done` runs on a scheduler worker (or inline when refused); the call stays open until then.
  core_->Infer(std::move(decoded.value()), [reactor, response_bytes, need_weights, call,
                                            log = std::move(log)](InferenceResponse result) {
    Status status = EncodeForwardResponse(result, need_weights, &call->response);
    if (status.ok()) status = SerializeRawMessage(call->response, response_bytes);
    FinishCall(reactor, log, status,
               "model=" + result.model + " queue_us=" + std::to_string(result.queue_us) +
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
  auto repository = core_->repository();
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
  auto repository = core_->repository();
  auto entry = repository->Find(request->name(), request->version());
  if (!entry) {
    // Resolve words the NOT_FOUND (unknown name or version, or no default model) and lists them.
    auto resolved = repository->Resolve(request->name(), request->version());
    FinishCall(reactor, log,
               resolved.ok() ? NotFound("model '" + Abbreviate(request->name()) + "' not found")
                             : resolved.status());
    return reactor;
  }
  FillModelInfo(*entry, entry->name == repository->default_name(), response);
  FinishCall(reactor, log, Status::Ok());
  return reactor;
}

}  // namespace mha::serve

namespace mha::serve {

grpc::ServerUnaryReactor* AttentionServiceImpl::GetModelStatistics(
    grpc::CallbackServerContext* context, const v1::ModelStatisticsRequest* request,
    v1::ModelStatisticsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "GetModelStatistics");
  auto stats = core_->Statistics(request->name(), request->version());
  if (stats.ok()) {
    for (const auto& v : *stats) {
      v1::ModelStatistics* s = response->add_models();
      s->set_name(v.name);
      s->set_version(v.version);
      s->set_last_inference_ms(v.last_inference_ms);
      s->set_inference_count(v.inference_count);
      s->set_execution_count(v.execution_count);
      s->set_success_count(v.success_count);
      s->set_failure_count(v.failure_count);
      s->set_queue_ns(v.queue_ns);
      s->set_compute_ns(v.compute_ns);
    }
  }
  FinishCall(reactor, log, stats.status());
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::AnalyzeModel(grpc::CallbackServerContext* context,
                                                             const v1::AnalyzeModelRequest* request,
                                                             v1::ModelAnalysis* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RequestLog log = StartRequest(context, "AnalyzeModel");
  auto result = core_->Analyze(request->model(), request->version());
  if (result.ok()) FillModelAnalysis(*result, response);
  FinishCall(reactor, log, result.status());
  return reactor;
}

}  // namespace mha::serve
