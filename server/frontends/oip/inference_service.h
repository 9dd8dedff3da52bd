// inference.GRPCInferenceService (Open Inference Protocol v2: KServe's and Triton's gRPC API),
// registered on the same server and port as mha.v1. Handlers only translate, like
// AttentionServiceImpl: decode (infer_request), call the serving core (InferenceServer::Infer: the
// same validation, limits, scheduling and error messages), encode, and map the status
// (proto/wire/status_convert). Every method is served on the completion-queue API, as mha.v1's
// (the app's CqQueue); ModelInfer as mha.v1 Forward: a small pass may run on the thread that took
// the call.
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
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/common/kserve_options.h"
#include "server/frontends/cq/cq_stream.h"
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
// Every method registered raw (bytes in, bytes out) on the completion-queue API, as mha.v1's
// (attention_service.h says why), so that a request that does not parse is answered
// INVALID_ARGUMENT with a message rather than gRPC's bare error. A new RPC in grpc_service.proto
// is added here and served in the constructor.
using InferenceServiceBase =
    gen::WithRawMethod_ServerLive<gen::WithRawMethod_ServerReady<gen::WithRawMethod_ModelReady<
        gen::WithRawMethod_ServerMetadata<gen::WithRawMethod_ModelMetadata<
            gen::WithRawMethod_ModelStreamInfer<gen::WithRawMethod_ModelConfig<
                gen::WithRawMethod_ModelStatistics<gen::WithRawMethod_RepositoryIndex<
                    gen::WithRawMethod_RepositoryModelLoad<gen::WithRawMethod_RepositoryModelUnload<
                        gen::WithRawMethod_SystemSharedMemoryStatus<
                            gen::WithRawMethod_SystemSharedMemoryRegister<
                                gen::WithRawMethod_SystemSharedMemoryUnregister<
                                    gen::WithRawMethod_CudaSharedMemoryStatus<
                                        gen::WithRawMethod_CudaSharedMemoryRegister<
                                            gen::WithRawMethod_CudaSharedMemoryUnregister<
                                                gen::WithRawMethod_ModelInfer<
                                                    gen::Service>>>>>>>>>>>>>>>>>>;
}  // namespace internal

// Every method is served on `queue`, with the same lifecycle as AttentionServiceImpl's.

class GrpcInferenceServiceImpl final : public internal::InferenceServiceBase {
 public:
  // `core` is not owned and must outlive the service.
  GrpcInferenceServiceImpl(InferenceServer* core, CqQueue* queue, OipFrontendOptions options);
  ~GrpcInferenceServiceImpl() override;

  void AddTo(grpc::ServerBuilder* builder);  // registers the service
  // One ModelInfer call, on a thread of the queue.
  void HandleModelInfer(CqCall* call);

  void HandleServerLive(const UnaryCall& call, const inference::ServerLiveRequest* request,
                        inference::ServerLiveResponse* response);
  void HandleServerReady(const UnaryCall& call, const inference::ServerReadyRequest* request,
                         inference::ServerReadyResponse* response);
  void HandleModelReady(const UnaryCall& call, const inference::ModelReadyRequest* request,
                        inference::ModelReadyResponse* response);
  void HandleServerMetadata(const UnaryCall& call, const inference::ServerMetadataRequest* request,
                            inference::ServerMetadataResponse* response);
  void HandleModelMetadata(const UnaryCall& call, const inference::ModelMetadataRequest* request,
                           inference::ModelMetadataResponse* response);
  CqBidiBase* HandleModelStreamInfer(std::unique_ptr<CqStreamCall> call);
  void HandleModelConfig(const UnaryCall& call, const inference::ModelConfigRequest* request,
                         inference::ModelConfigResponse* response);
  void HandleModelStatistics(const UnaryCall& call,
                             const inference::ModelStatisticsRequest* request,
                             inference::ModelStatisticsResponse* response);
  void HandleRepositoryIndex(const UnaryCall& call,
                             const inference::RepositoryIndexRequest* request,
                             inference::RepositoryIndexResponse* response);
  void HandleRepositoryModelLoad(const UnaryCall& call,
                                 const inference::RepositoryModelLoadRequest* request,
                                 inference::RepositoryModelLoadResponse* response);
  void HandleRepositoryModelUnload(const UnaryCall& call,
                                   const inference::RepositoryModelUnloadRequest* request,
                                   inference::RepositoryModelUnloadResponse* response);
  // shm_rpcs.cc: Triton's shared-memory extension (shm/shared_memory_registry.h).
  void HandleSystemSharedMemoryStatus(const UnaryCall& call,
                                      const inference::SystemSharedMemoryStatusRequest* request,
                                      inference::SystemSharedMemoryStatusResponse* response);
  void HandleSystemSharedMemoryRegister(const UnaryCall& call,
                                        const inference::SystemSharedMemoryRegisterRequest* request,
                                        inference::SystemSharedMemoryRegisterResponse* response);
  void HandleSystemSharedMemoryUnregister(
      const UnaryCall& call, const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response);
  void HandleCudaSharedMemoryStatus(const UnaryCall& call,
                                    const inference::CudaSharedMemoryStatusRequest* request,
                                    inference::CudaSharedMemoryStatusResponse* response);
  void HandleCudaSharedMemoryRegister(const UnaryCall& call,
                                      const inference::CudaSharedMemoryRegisterRequest* request,
                                      inference::CudaSharedMemoryRegisterResponse* response);
  void HandleCudaSharedMemoryUnregister(const UnaryCall& call,
                                        const inference::CudaSharedMemoryUnregisterRequest* request,
                                        inference::CudaSharedMemoryUnregisterResponse* response);

 private:
  // A repository load (`load`) / unload: the admin token, then ControlRepositoryModel
  // (common/repository_control.h), answered when it calls back.
  void ControlModel(const UnaryCall& call, const char* rpc, const std::string& model,
                    Status parameters, bool load);

  InferenceServer* const core_;
  const OipFrontendOptions options_;
  std::vector<std::unique_ptr<CqUnaryMethod>> unary_;
  std::unique_ptr<CqStreamMethod> stream_;
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
