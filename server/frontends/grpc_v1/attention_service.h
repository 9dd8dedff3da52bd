// mha.v1.AttentionService. Handlers only translate: decode the request (forward_request), call the
// serving core (InferenceServer::Infer), encode the answer and map the status
// (proto/wire/status_convert). Every method is served on the completion-queue API (the app's
// CqQueue: unary methods through cq/cq_unary.h, the streams through cq/cq_stream.h). In
// Forward, the hot unary call, a small pass may run on the thread that took the call when another
// waits to take the next; other passes run on the schedulers' workers, which also finish the
// calls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/cq/cq_stream.h"
#include "server/frontends/grpc_v1/forward_request.h"
#include "server/serving/inference_server.h"
#include "server/serving/serving_defaults.h"

namespace mha::serve {

struct GrpcFrontendOptions {
  int64_t max_message_bytes = kDefaultMaxMessageBytes;  // a request above it is RESOURCE_EXHAUSTED
  int stream_window = 4;  // requests of one ForwardStream submitted but not yet written
  // Registered shared-memory regions (the server's one registry, which the Open Inference
  // Protocol's front ends register into); null = a tensor naming a region is refused.
  const SharedMemoryRegistry* shm = nullptr;
};

namespace internal {
using gen = v1::AttentionService;
// Every method raw, on the completion-queue API (none synchronous, none on the callback API: either
// would start gRPC threads of their own polling beside the queue's, docs/host_floor.md). A new RPC
// in attention.proto is added here and served in the constructor (without it the method would
// answer UNIMPLEMENTED).
using AttentionServiceBase = gen::WithRawMethod_ForwardStream<
    gen::WithRawMethod_ListModels<gen::WithRawMethod_GetModel<gen::WithRawMethod_GetModelStatistics<
        gen::WithRawMethod_AnalyzeModel<gen::WithRawMethod_OpenSession<
            gen::WithRawMethod_CloseSession<gen::WithRawMethod_LayerSteps<
                gen::WithRawMethod_ForkSession<gen::WithRawMethod_TruncateSession<
                    gen::WithRawMethod_Forward<gen::Service>>>>>>>>>>>;
}  // namespace internal

// Every method is registered raw (bytes in, bytes out) so that a request that does not parse can be
// answered INVALID_ARGUMENT with a message, rather than gRPC's bare UNIMPLEMENTED.
//
// The methods are served on `queue` (cq_queue.h: the caller adds it to the builder, starts it
// after BuildAndStart and shuts it down after the server's Shutdown and the core's Stop); the
// service outlives the server and the queue's Shutdown. Handlers run on the queue's threads; one
// that blocks (AnalyzeModel's first SVDs, OpenSession's pass) first hands the queue on
// (CqQueue::Caller().BeforeBlocking()).
class AttentionServiceImpl final : public internal::AttentionServiceBase {
 public:
  // `core` is not owned and must outlive the service.
  AttentionServiceImpl(InferenceServer* core, CqQueue* queue, GrpcFrontendOptions options);
  ~AttentionServiceImpl() override;

  InferenceServer* core() const { return core_; }
  const GrpcFrontendOptions& options() const { return options_; }

  void AddTo(grpc::ServerBuilder* builder);  // registers the service

  // One Forward call, on a thread of the queue.
  void HandleForward(CqCall* call);
  // The reactor of a ForwardStream call that started (forward_stream.h).
  CqBidiBase* HandleForwardStream(std::unique_ptr<CqStreamCall> call);
  void HandleListModels(const UnaryCall& call, const v1::ListModelsRequest* request,
                        v1::ListModelsResponse* response);
  void HandleGetModel(const UnaryCall& call, const v1::GetModelRequest* request,
                      v1::ModelInfo* response);
  void HandleGetModelStatistics(const UnaryCall& call, const v1::ModelStatisticsRequest* request,
                                v1::ModelStatisticsResponse* response);
  // Seed 001's head analysis (computed on the version's first call, on this gRPC thread: four
  // SVDs of [E, E] in float64; cached for the version's lifetime after that).
  void HandleAnalyzeModel(const UnaryCall& call, const v1::AnalyzeModelRequest* request,
                          v1::ModelAnalysis* response);
  // Decoding sessions (session_service.cc). OpenSession answers on the gRPC thread: a
  // cross-attention session's key/value projection is one small pass.
  void HandleOpenSession(const UnaryCall& call, const v1::OpenSessionRequest* request,
                         v1::OpenSessionResponse* response);
  void HandleCloseSession(const UnaryCall& call, const v1::CloseSessionRequest* request,
                          v1::CloseSessionResponse* response);
  void HandleForkSession(const UnaryCall& call, const v1::ForkSessionRequest* request,
                         v1::ForkSessionResponse* response);
  void HandleTruncateSession(const UnaryCall& call, const v1::TruncateSessionRequest* request,
                             v1::TruncateSessionResponse* response);
  // The per-layer step stream of multi-layer models (layer_steps.h, docs/afd_stream.md).
  CqBidiBase* HandleLayerSteps(std::unique_ptr<CqStreamCall> call);

 private:
  InferenceServer* const core_;
  const GrpcFrontendOptions options_;
  std::vector<std::unique_ptr<CqUnaryMethod>> unary_;
  std::vector<std::unique_ptr<CqStreamMethod>> streams_;
};

// Decodes `request` and adds what the call knows: deadline, cancellation, request id, start.
// Shared-memory tensors go into `plan` (forward_request.h), kept by the caller until answered.
StatusOr<InferenceRequest> DecodeCall(const v1::ForwardRequest& request,
                                      const GrpcFrontendOptions& options, bool borrow,
                                      grpc::ServerContextBase* context, const RequestLog& log,
                                      ShmPlan* plan);

}  // namespace mha::serve
