#include "server/frontends/grpc_v1/attention_service.h"

#include <memory>
#include <utility>
#include <vector>

#include "mha/text.h"
#include "proto/wire/status_convert.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/cq/cq_queue.h"
#include "server/frontends/grpc_v1/forward_stream.h"
#include "server/frontends/grpc_v1/head_options.h"

namespace mha::serve {
namespace {

struct ForwardCall {
  v1::ForwardRequest request;
  ShmPlan shm;  // the shared-memory regions its tensors use, held until answered
};

}  // namespace

StatusOr<InferenceRequest> DecodeCall(const v1::ForwardRequest& request,
                                      const GrpcFrontendOptions& options, bool borrow,
                                      grpc::ServerContextBase* context, const RequestLog& log,
                                      ShmPlan* plan) {
  MHA_RETURN_IF_ERROR(CheckSessionHeader(context, request.session_id()));
  auto decoded =
      DecodeForwardRequest(request, options.max_message_bytes, borrow, options.shm, plan);
  if (!decoded.ok()) return decoded.status();
  StampRequest(context, log, &decoded.value());
  return decoded;
}

AttentionServiceImpl::AttentionServiceImpl(InferenceServer* core, CqQueue* queue,
                                           GrpcFrontendOptions options)
    : core_(core), options_(options) {
  using S = AttentionServiceImpl;
  unary_.push_back(ServeRawUnary(queue, this, &S::RequestForward,
                                 [this](CqCall* call) { HandleForward(call); }));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestListModels, "ListModels", &S::HandleListModels));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestGetModel, "GetModel", &S::HandleGetModel));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestGetModelStatistics, "GetModelStatistics",
                                   &S::HandleGetModelStatistics));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestAnalyzeModel, "AnalyzeModel",
                                   &S::HandleAnalyzeModel));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestOpenSession, "OpenSession", &S::HandleOpenSession));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestCloseSession, "CloseSession",
                                   &S::HandleCloseSession));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestForkSession, "ForkSession", &S::HandleForkSession));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestTruncateSession, "TruncateSession",
                                   &S::HandleTruncateSession));
  streams_.push_back(ServeRawStream(
      queue, this, &S::RequestForwardStream,
      [this](std::unique_ptr<CqStreamCall> call) { return HandleForwardStream(std::move(call)); }));
  streams_.push_back(ServeRawStream(
      queue, this, &S::RequestLayerSteps,
      [this](std::unique_ptr<CqStreamCall> call) { return HandleLayerSteps(std::move(call)); }));
}

AttentionServiceImpl::~AttentionServiceImpl() = default;

void AttentionServiceImpl::AddTo(grpc::ServerBuilder* builder) { builder->RegisterService(this); }

void AttentionServiceImpl::HandleForward(CqCall* cq_call) {
  grpc::ServerContext* context = cq_call->context();
  const UnaryFinish finish(cq_call, StartRequest(context, "Forward"));
  const RequestLog& log = finish.log();
  // The messages live until the call is answered: the decoded tensors borrow the request's bytes.
  auto call = std::make_shared<ForwardCall>();
  if (Status parsed = ParseRawRequest(cq_call->request(), &call->request); !parsed.ok()) {
    core_->CountRequest(std::nullopt, parsed, log.start, Protocol::kNative);
    return finish(parsed);
  }
  auto decoded = DecodeCall(call->request, options_, /*borrow=*/true, context, log, &call->shm);
  if (!decoded.ok()) {
    core_->CountRequest(call->request.model(), decoded.status(), log.start, Protocol::kNative);
    return finish(decoded.status());
  }
  const bool need_weights = decoded->inputs.need_weights;
  // This thread may compute the pass itself when another one is free to take the next call.
  decoded->caller = CqQueue::Caller();
  grpc::ByteBuffer* response_bytes = cq_call->response();
  // `done` runs inline (refused, or a pass this thread ran) or on a scheduler worker; the call
  // stays open until then.
  core_->Infer(std::move(decoded.value()), [finish, response_bytes, need_weights,
                                            call](InferenceResponse result) {
    // The output's bytes go to gRPC without a copy (borrowed_bytes.h).
    const Status status = WriteForwardResponse(result, need_weights, response_bytes, &call->shm);
    finish(status, InferDetail(result.model, result.queue_us, result.compute_us));
  });
}

CqBidiBase* AttentionServiceImpl::HandleForwardStream(std::unique_ptr<CqStreamCall> call) {
  grpc::ServerContextBase* context = call->context();
  return new ForwardStreamReactor(ForwardStreamPolicy{this}, context, std::move(call));
}

void AttentionServiceImpl::HandleListModels(const UnaryCall& call,
                                            const v1::ListModelsRequest* request,
                                            v1::ListModelsResponse* response) {
  return Unary(call, "ListModels", [&] {
    auto repository = core_->repository();
    response->set_default_model(repository->default_name());
    for (const auto& entry : repository->entries()) {
      FillModelInfo(*entry, entry->name == repository->default_name(), response->add_models());
    }
    return Status::Ok();
  });
}

void AttentionServiceImpl::HandleGetModel(const UnaryCall& call, const v1::GetModelRequest* request,
                                          v1::ModelInfo* response) {
  return Unary(call, "GetModel", [&] {
    auto repository = core_->repository();
    auto entry = repository->Find(request->name(), request->version());
    if (!entry) {
      // Resolve words the NOT_FOUND (unknown name or version, or no default model) and lists
      // them.
      auto resolved = repository->Resolve(request->name(), request->version());
      return resolved.ok() ? NotFound("model '" + Abbreviate(request->name()) + "' not found")
                           : resolved.status();
    }
    FillModelInfo(*entry, entry->name == repository->default_name(), response);
    return Status::Ok();
  });
}

void AttentionServiceImpl::HandleGetModelStatistics(const UnaryCall& call,
                                                    const v1::ModelStatisticsRequest* request,
                                                    v1::ModelStatisticsResponse* response) {
  return Unary(call, "GetModelStatistics", [&] {
    auto stats = core_->Statistics(request->name(), request->version());
    for (const auto& v : stats.ok() ? *stats : std::vector<VersionStatistics>()) {
      v1::ModelStatistics* s = response->add_models();
      s->set_name(v.name);
      s->set_version(v.version);
      s->set_last_inference_ms(v.stats.last_inference_ms);
      s->set_inference_count(v.stats.inference_count);
      s->set_execution_count(v.stats.execution_count);
      s->set_success_count(v.stats.success_count);
      s->set_failure_count(v.stats.failure_count);
      s->set_queue_ns(v.stats.queue_ns);
      s->set_compute_ns(v.stats.compute_ns);
    }
    return stats.status();
  });
}

void AttentionServiceImpl::HandleAnalyzeModel(const UnaryCall& call,
                                              const v1::AnalyzeModelRequest* request,
                                              v1::ModelAnalysis* response) {
  return Unary(call, "AnalyzeModel", [&] {
    CqQueue::Caller().BeforeBlocking();  // the version's first call computes four SVDs here
    auto result = core_->Analyze(request->model(), request->version());
    if (result.ok()) FillModelAnalysis(*result, response);
    return result.status();
  });
}

}  // namespace mha::serve
