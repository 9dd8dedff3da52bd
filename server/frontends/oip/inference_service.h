// inference.GRPCInferenceService (Open Inference Protocol v2: KServe's and Triton's gRPC API),
// registered on the same server and port as mha.v1. Handlers only translate, like
// AttentionServiceImpl: decode (infer_request), call the serving core (InferenceServer::Infer: the
// same validation, limits, scheduling and error messages), encode, and map the status
// (proto/wire/status_convert). ModelInfer, the hot unary call, is served on the completion-queue
// API as mha.v1 Forward (common/cq_unary.h: its own threads, a small pass may run on the thread
// that took the call); every other method on the callback API, where no handler blocks a gRPC
// thread.
//
// Served: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer,
// ModelStreamInfer (infer_stream.h), ModelConfig, ModelStatistics, and the model repository
// extension RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload (repository_rpcs.cc: the
// model lifecycle's LoadModel / UnloadModel, guarded by the same admin token), and the
// shared-memory extension (shm_rpcs.cc). gRPC itself answers UNIMPLEMENTED for the RPCs of the
// specification that the proto leaves out (Trace, LogSettings).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "inference/grpc_service.grpc.pb.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/common/kserve_options.h"
#include "server/frontends/oip/infer_request.h"
#include "server/frontends/oip/model_metadata.h"
#include "server/frontends/oip/model_statistics.h"
#include "server/serving/inference_server.h"
#include "server/serving/model_controller.h"

namespace mha::serve::oip {

inline constexpr char kServerName[] = "mha-serve";

struct OipFrontendOptions : KServeOptions {
  int stream_window = 4;  // ModelStreamInfer: requests of one stream in flight at once
};

namespace internal {
using gen = inference::GRPCInferenceService;
// ModelInfer is registered raw (bytes in, bytes out), as mha.v1 Forward, so that a request that
// does not parse is answered INVALID_ARGUMENT with a message rather than gRPC's bare error; on the
// completion-queue API, first in the chain (attention_service.h says why). A new RPC in
// grpc_service.proto is added here.
using InferenceServiceBase = gen::WithCallbackMethod_ServerLive<gen::WithCallbackMethod_ServerReady<
    gen::WithCallbackMethod_ModelReady<gen::WithCallbackMethod_ServerMetadata<
        gen::WithCallbackMethod_ModelMetadata<gen::WithCallbackMethod_ModelStreamInfer<
            gen::WithCallbackMethod_ModelConfig<gen::WithCallbackMethod_ModelStatistics<
                gen::WithCallbackMethod_RepositoryIndex<gen::WithCallbackMethod_RepositoryModelLoad<
                    gen::WithCallbackMethod_RepositoryModelUnload<
                        gen::WithCallbackMethod_SystemSharedMemoryStatus<
                            gen::WithCallbackMethod_SystemSharedMemoryRegister<
                                gen::WithCallbackMethod_SystemSharedMemoryUnregister<
                                    gen::WithCallbackMethod_CudaSharedMemoryStatus<
                                        gen::WithCallbackMethod_CudaSharedMemoryRegister<
                                            gen::WithCallbackMethod_CudaSharedMemoryUnregister<
                                                gen::WithRawMethod_ModelInfer<
                                                    gen::Service>>>>>>>>>>>>>>>>>>;
}  // namespace internal

// ModelInfer is served on `queue`, with the same lifecycle as AttentionServiceImpl's Forward.

class GrpcInferenceServiceImpl final : public internal::InferenceServiceBase {
 public:
  // `core` is not owned and must outlive the service.
  GrpcInferenceServiceImpl(InferenceServer* core, CqQueue* queue, OipFrontendOptions options);
  ~GrpcInferenceServiceImpl() override;

  void AddTo(grpc::ServerBuilder* builder);  // registers the service
  // One ModelInfer call, on a thread of the queue.
  void HandleModelInfer(CqCall* call);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;
  // shm_rpcs.cc: Triton's shared-memory extension (common/shared_memory_registry.h).
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;

 private:
  // A repository load (`load`) / unload: the admin token, then ControlRepositoryModel
  // (common/repository_control.h), answered when it calls back.
  grpc::ServerUnaryReactor* ControlModel(grpc::CallbackServerContext* context, const char* rpc,
                                         const std::string& model, Status parameters, bool load);

  InferenceServer* const core_;
  const OipFrontendOptions options_;
  std::unique_ptr<CqUnaryMethod> infer_;
};

// Decodes `request` (borrowing its bytes), checks the requested model version and adds what the
// call knows: deadline, cancellation, request id, start.
StatusOr<InferCall> DecodeCall(const inference::ModelInferRequest& request,
                               const OipFrontendOptions& options, const InferenceServer& core,
                               grpc::ServerContextBase* context, const RequestLog& log);

// The READY entry of `name` ("" = the default model) at `version` ("" = the newest READY one):
// ModelRepository::Resolve's NOT_FOUND / UNAVAILABLE / FAILED_PRECONDITION.
StatusOr<std::shared_ptr<const ModelEntry>> ResolveVersion(const ModelRepository& repository,
                                                           const std::string& name,
                                                           const std::string& version);

}  // namespace mha::serve::oip
