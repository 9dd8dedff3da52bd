#include "server/frontends/oip/inference_service.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "mha/device_memory.h"
#include "mha/text.h"
#include "server/frontends/common/grpc_call.h"
#include "server/frontends/oip/infer_stream.h"
#include "server/frontends/oip/sequence.h"
#include "server/serving/observability/metrics.h"

namespace mha::serve::oip {
namespace {

// The messages of one ModelInfer call; they live until it is answered (the decoded tensors
// borrow the request's bytes).
struct ModelInferCall {
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
};

}  // namespace

StatusOr<std::shared_ptr<const ModelEntry>> ResolveVersion(const ModelRepository& repository,
                                                           const std::string& name,
                                                           const std::string& version) {
  return repository.Resolve(name, version);
}

StatusOr<InferCall> DecodeCall(const inference::ModelInferRequest& request,
                               const OipFrontendOptions& options, const InferenceServer& core,
                               grpc::ServerContextBase* context, const RequestLog& log) {
  DecodeOptions decode;
  decode.max_message_bytes = options.max_message_bytes;
  decode.borrow = true;
  decode.shm = options.shm;
  auto decoded = DecodeModelInferRequest(request, decode);
  if (!decoded.ok()) return decoded.status();
  StampRequest(context, log, &decoded->request);
  ApplyTimeout(&decoded.value());  // parameters.timeout, when it is sooner
  return decoded;
}

GrpcInferenceServiceImpl::GrpcInferenceServiceImpl(InferenceServer* core, CqQueue* queue,
                                                   OipFrontendOptions options)
    : core_(core), options_(std::move(options)) {
  using S = GrpcInferenceServiceImpl;
  unary_.push_back(ServeRawUnary(queue, this, &S::RequestModelInfer,
                                 [this](CqCall* call) { HandleModelInfer(call); }));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestServerLive, "ServerLive", &S::HandleServerLive));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestServerReady, "ServerReady", &S::HandleServerReady));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestModelReady, "ModelReady", &S::HandleModelReady));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestServerMetadata, "ServerMetadata",
                                   &S::HandleServerMetadata));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestModelMetadata, "ModelMetadata",
                                   &S::HandleModelMetadata));
  unary_.push_back(
      ServeTypedUnary(queue, this, &S::RequestModelConfig, "ModelConfig", &S::HandleModelConfig));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestModelStatistics, "ModelStatistics",
                                   &S::HandleModelStatistics));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestRepositoryIndex, "RepositoryIndex",
                                   &S::HandleRepositoryIndex));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestRepositoryModelLoad,
                                   "RepositoryModelLoad", &S::HandleRepositoryModelLoad));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestRepositoryModelUnload,
                                   "RepositoryModelUnload", &S::HandleRepositoryModelUnload));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestSystemSharedMemoryStatus,
                                   "SystemSharedMemoryStatus", &S::HandleSystemSharedMemoryStatus));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestSystemSharedMemoryRegister,
                                   "SystemSharedMemoryRegister",
                                   &S::HandleSystemSharedMemoryRegister));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestSystemSharedMemoryUnregister,
                                   "SystemSharedMemoryUnregister",
                                   &S::HandleSystemSharedMemoryUnregister));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestCudaSharedMemoryStatus,
                                   "CudaSharedMemoryStatus", &S::HandleCudaSharedMemoryStatus));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestCudaSharedMemoryRegister,
                                   "CudaSharedMemoryRegister", &S::HandleCudaSharedMemoryRegister));
  unary_.push_back(ServeTypedUnary(queue, this, &S::RequestCudaSharedMemoryUnregister,
                                   "CudaSharedMemoryUnregister",
                                   &S::HandleCudaSharedMemoryUnregister));
  stream_ = ServeRawStream(queue, this, &S::RequestModelStreamInfer,
                           [this](std::unique_ptr<CqStreamCall> call) {
                             return HandleModelStreamInfer(std::move(call));
                           });
}

GrpcInferenceServiceImpl::~GrpcInferenceServiceImpl() = default;

void GrpcInferenceServiceImpl::AddTo(grpc::ServerBuilder* builder) {
  builder->RegisterService(this);
}

void GrpcInferenceServiceImpl::HandleServerLive(const UnaryCall& call,
                                                const inference::ServerLiveRequest* request,
                                                inference::ServerLiveResponse* response) {
  return Unary(call, "ServerLive", [&] {
    response->set_live(true);  // answering at all is being live
    return Status::Ok();
  });
}

void GrpcInferenceServiceImpl::HandleServerReady(const UnaryCall& call,
                                                 const inference::ServerReadyRequest* request,
                                                 inference::ServerReadyResponse* response) {
  return Unary(call, "ServerReady", [&] {
    response->set_ready(options_.server_ready ? options_.server_ready()
                                              : core_->repository()->Ready());
    return Status::Ok();
  });
}

void GrpcInferenceServiceImpl::HandleModelReady(const UnaryCall& call,
                                                const inference::ModelReadyRequest* request,
                                                inference::ModelReadyResponse* response) {
  return Unary(call, "ModelReady", [&] {
    // Not ready (rather than an error) for unknown names, as Triton answers readiness probes.
    auto entry = ResolveVersion(*core_->repository(), request->name(), request->version());
    response->set_ready(entry.ok());
    return Status::Ok();
  });
}

void GrpcInferenceServiceImpl::HandleServerMetadata(const UnaryCall& call,
                                                    const inference::ServerMetadataRequest* request,
                                                    inference::ServerMetadataResponse* response) {
  return Unary(call, "ServerMetadata", [&] {
    response->set_name(kServerName);
    response->set_version(options_.server_version.empty() ? CurrentBuildInfo().version
                                                          : options_.server_version);
    response->add_extensions("model_configuration");
    response->add_extensions("statistics");
    response->add_extensions("sequence");
    response->add_extensions("system_shared_memory");  // shm_rpcs.cc
    if (CudaShmBuilt()) response->add_extensions("cuda_shared_memory");
    return Status::Ok();
  });
}

void GrpcInferenceServiceImpl::HandleModelMetadata(const UnaryCall& call,
                                                   const inference::ModelMetadataRequest* request,
                                                   inference::ModelMetadataResponse* response) {
  return Unary(call, "ModelMetadata", [&] {
    auto entry = ResolveVersion(*core_->repository(), request->name(), request->version());
    if (entry.ok()) FillModelMetadata(*entry.value(), response);
    return entry.status();
  });
}

void GrpcInferenceServiceImpl::HandleModelInfer(CqCall* cq_call) {
  grpc::ServerContext* context = cq_call->context();
  const UnaryFinish finish(cq_call, StartRequest(context, "ModelInfer"));
  const RequestLog& log = finish.log();
  auto call = std::make_shared<ModelInferCall>();
  if (Status parsed = ParseRawRequest(cq_call->request(), &call->request); !parsed.ok()) {
    core_->CountRequest(std::nullopt, parsed, log.start, Protocol::kOip);
    return finish(parsed);
  }
  auto decoded = DecodeCall(call->request, options_, *core_, context, log);
  Status begun = decoded.status();
  if (begun.ok()) begun = BeginSequence(core_, &decoded.value());  // sequence.h
  if (!begun.ok()) {
    core_->CountRequest(call->request.model_name(), begun, log.start, Protocol::kOip);
    return finish(begun);
  }
  InferCall& infer = decoded.value();
  std::string session = infer.request.session_id;
  infer.request.caller = CqQueue::Caller();  // a pass on this thread (work_queue.h)
  grpc::ByteBuffer* response_bytes = cq_call->response();
  // `done` runs inline (refused, or a pass this thread ran) or on a scheduler worker; the call
  // stays open until then.
  core_->Infer(
      std::move(infer.request),
      [finish, response_bytes, call, outputs = std::move(infer.outputs), id = std::move(infer.id),
       core = core_, sequence = std::move(infer.sequence), session = std::move(session),
       shm = std::move(infer.shm)](InferenceResponse result) {
        EndSequence(core, sequence, session, result.status);
        Status status = EncodeModelInferResponse(result, outputs, id, &call->response, &shm);
        if (status.ok()) status = SerializeRawMessage(call->response, response_bytes);
        finish(status, InferDetail(result.model, result.queue_us, result.compute_us));
      });
}

CqBidiBase* GrpcInferenceServiceImpl::HandleModelStreamInfer(std::unique_ptr<CqStreamCall> call) {
  grpc::ServerContextBase* context = call->context();
  return new InferStreamReactor(InferStreamPolicy{core_, options_}, context, std::move(call));
}

void GrpcInferenceServiceImpl::HandleModelConfig(const UnaryCall& call,
                                                 const inference::ModelConfigRequest* request,
                                                 inference::ModelConfigResponse* response) {
  return Unary(call, "ModelConfig", [&] {
    auto entry = ResolveVersion(*core_->repository(), request->name(), request->version());
    if (entry.ok()) {
      const ModelEntry& e = *entry.value();
      FillModelConfig(e, core_->Scheduling(e.name, e.version), response->mutable_config());
    }
    return entry.status();
  });
}

void GrpcInferenceServiceImpl::HandleModelStatistics(
    const UnaryCall& call, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Unary(call, "ModelStatistics", [&] {
    return FillStatisticsResponse(*core_, request->name(), request->version(), response);
  });
}

}  // namespace mha::serve::oip
