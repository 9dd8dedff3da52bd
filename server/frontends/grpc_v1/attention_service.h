// mha.v1.AttentionService. Handlers only translate: decode the request (forward_request), call the
// serving core (InferenceServer::Infer), encode the answer and map the status
// (proto/wire/status_convert). Forward, the hot unary call, is served on the completion-queue API
// (common/cq_unary.h: its own threads; a small pass may run on the thread that took the call when
// nothing else waits); every other method on the callback API, where no handler blocks a gRPC
// thread: passes run on the schedulers' workers, which also finish the calls.
#pragma once

#include <cstdint>
#include <memory>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/common/grpc_call.h"
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
// Forward raw on the completion-queue API, first in the chain: marking a method raw resets its
// handler only while it is still synchronous, so the callback methods are marked after it. A new
// RPC in attention.proto is added here (without it the method would answer UNIMPLEMENTED).
using AttentionServiceBase =
    gen::WithCallbackMethod_ForwardStream<gen::WithCallbackMethod_ListModels<
        gen::WithCallbackMethod_GetModel<gen::WithCallbackMethod_GetModelStatistics<
            gen::WithCallbackMethod_AnalyzeModel<gen::WithCallbackMethod_OpenSession<
                gen::WithCallbackMethod_CloseSession<gen::WithCallbackMethod_LayerSteps<
                    gen::WithCallbackMethod_ForkSession<gen::WithCallbackMethod_TruncateSession<
                        gen::WithRawMethod_Forward<gen::Service>>>>>>>>>>>;
}  // namespace internal

// Forward is registered raw (bytes in, bytes out) so that a request that does not parse can be
// answered INVALID_ARGUMENT with a message, rather than gRPC's bare UNIMPLEMENTED.
//
// Forward is served on `queue` (cq_queue.h: the caller adds it to the builder, starts it after
// BuildAndStart and shuts it down after the server's Shutdown and the core's Stop); the service
// outlives the server and the queue's Shutdown.
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
  grpc::ServerBidiReactor<v1::ForwardRequest, v1::ForwardResponse>* ForwardStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetModelStatistics(grpc::CallbackServerContext* context,
                                               const v1::ModelStatisticsRequest* request,
                                               v1::ModelStatisticsResponse* response) override;
  // Seed 001's head analysis (computed on the version's first call, on this gRPC thread: four
  // SVDs of [E, E] in float64; cached for the version's lifetime after that).
  grpc::ServerUnaryReactor* AnalyzeModel(grpc::CallbackServerContext* context,
                                         const v1::AnalyzeModelRequest* request,
                                         v1::ModelAnalysis* response) override;
  // Decoding sessions (session_service.cc). OpenSession answers on the gRPC thread: a
  // cross-attention session's key/value projection is one small pass.
  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* context,
                                        const v1::OpenSessionRequest* request,
                                        v1::OpenSessionResponse* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const v1::ForkSessionRequest* request,
                                        v1::ForkSessionResponse* response) override;
  grpc::ServerUnaryReactor* TruncateSession(grpc::CallbackServerContext* context,
                                            const v1::TruncateSessionRequest* request,
                                            v1::TruncateSessionResponse* response) override;
  // The per-layer step stream of multi-layer models (layer_steps.h, docs/afd_stream.md).
  grpc::ServerBidiReactor<v1::LayerStepRequest, v1::LayerStepResponse>* LayerSteps(
      grpc::CallbackServerContext* context) override;

 private:
  InferenceServer* const core_;
  const GrpcFrontendOptions options_;
  std::unique_ptr<CqUnaryMethod> forward_;
};

// Decodes `request` and adds what the call knows: deadline, cancellation, request id, start.
// Shared-memory tensors go into `plan` (forward_request.h), kept by the caller until answered.
StatusOr<InferenceRequest> DecodeCall(const v1::ForwardRequest& request,
                                      const GrpcFrontendOptions& options, bool borrow,
                                      grpc::ServerContextBase* context, const RequestLog& log,
                                      ShmPlan* plan);

}  // namespace mha::serve
