#include "client/mha_client.h"

#include <grpcpp/security/credentials.h>

#include <thread>

#include "client/oip_translate.h"
#include "proto/wire/status_convert.h"

namespace mha::client {
namespace {

std::string InitialMetadata(const grpc::ClientContext& context, const char* key) {
  const auto& metadata = context.GetServerInitialMetadata();
  auto it = metadata.find(key);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.length());
}

}  // namespace

AttentionClient::AttentionClient(ClientOptions options) : options_(std::move(options)) {
  // Message sizes unlimited by default (per-head weights get big; the server decides with
  // --max-message-bytes); load balancing, health checking and retries: channel.h; plaintext
  // unless options_.tls is set (credentials.h; a bad TLS file throws, never falls back).
  channel_ = MakeClientChannel(options_.target, options_.channel, options_.tls);
  stub_ = v1::AttentionService::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
  control_ = v1::ModelControlService::NewStub(channel_);
  oip_ = inference::GRPCInferenceService::NewStub(channel_);
}

void AttentionClient::PrepareAdmin(grpc::ClientContext* context,
                                   std::optional<std::chrono::milliseconds> timeout) const {
  Prepare(context, timeout);
  if (!options_.admin_token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.admin_token);
  }
}

Status AttentionClient::LoadModel(const std::string& name,
                                  std::optional<std::chrono::milliseconds> timeout) {
  grpc::ClientContext context;
  PrepareAdmin(&context, timeout);
  v1::LoadModelRequest request;
  request.set_name(name);
  v1::LoadModelResponse response;
  return codec::FromGrpcStatus(control_->LoadModel(&context, request, &response));
}

Status AttentionClient::UnloadModel(const std::string& name,
                                    std::optional<std::chrono::milliseconds> timeout) {
  grpc::ClientContext context;
  PrepareAdmin(&context, timeout);
  v1::UnloadModelRequest request;
  request.set_name(name);
  v1::UnloadModelResponse response;
  return codec::FromGrpcStatus(control_->UnloadModel(&context, request, &response));
}

StatusOr<v1::OpenSessionResponse> AttentionClient::OpenSession(
    const v1::OpenSessionRequest& request, std::optional<std::chrono::milliseconds> timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout, "", request.session_id());
  v1::OpenSessionResponse response;
  const grpc::Status s = stub_->OpenSession(&context, request, &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<v1::CloseSessionResponse> AttentionClient::CloseSession(const std::string& session_id) {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt, "", session_id);
  v1::CloseSessionRequest request;
  request.set_session_id(session_id);
  v1::CloseSessionResponse response;
  const grpc::Status s = stub_->CloseSession(&context, request, &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<v1::ForkSessionResponse> AttentionClient::ForkSession(const std::string& session_id,
                                                               int64_t tokens,
                                                               const std::string& new_session_id) {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt, "", session_id);
  v1::ForkSessionRequest request;
  request.set_session_id(session_id);
  request.set_tokens(tokens);
  request.set_new_session_id(new_session_id);
  v1::ForkSessionResponse response;
  const grpc::Status s = stub_->ForkSession(&context, request, &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<v1::TruncateSessionResponse> AttentionClient::TruncateSession(
    const std::string& session_id, int64_t tokens) {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt, "", session_id);
  v1::TruncateSessionRequest request;
  request.set_session_id(session_id);
  request.set_tokens(tokens);
  v1::TruncateSessionResponse response;
  const grpc::Status s = stub_->TruncateSession(&context, request, &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<v1::RepositoryIndexResponse> AttentionClient::RepositoryIndex() {
  grpc::ClientContext context;
  PrepareAdmin(&context, std::nullopt);
  v1::RepositoryIndexResponse response;
  const grpc::Status s =
      control_->RepositoryIndex(&context, v1::RepositoryIndexRequest(), &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

void AttentionClient::Prepare(grpc::ClientContext* context,
                              std::optional<std::chrono::milliseconds> timeout,
                              const std::string& request_id, const std::string& session_id) const {
  context->set_deadline(std::chrono::system_clock::now() + timeout.value_or(options_.timeout));
  if (!request_id.empty()) context->AddMetadata("x-request-id", request_id);
  // Every session call carries its id for proxies that pin sessions by a header hash.
  if (!session_id.empty()) context->AddMetadata(kSessionIdHeader, session_id);
}

StatusOr<v1::ListModelsResponse> AttentionClient::ListModels() {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt);
  v1::ListModelsResponse response;
  const grpc::Status s = stub_->ListModels(&context, v1::ListModelsRequest(), &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<v1::ModelInfo> AttentionClient::GetModel(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt);
  v1::GetModelRequest request;
  request.set_name(name);
  v1::ModelInfo info;
  const grpc::Status s = stub_->GetModel(&context, request, &info);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return info;
}

StatusOr<v1::ModelStatisticsResponse> AttentionClient::GetModelStatistics(
    const std::string& name, const std::string& version) {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt);
  v1::ModelStatisticsRequest request;
  request.set_name(name);
  request.set_version(version);
  v1::ModelStatisticsResponse response;
  const grpc::Status s = stub_->GetModelStatistics(&context, request, &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<v1::ModelAnalysis> AttentionClient::AnalyzeModel(const std::string& name,
                                                          const std::string& version) {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt);
  v1::AnalyzeModelRequest request;
  request.set_model(name);
  request.set_version(version);
  v1::ModelAnalysis response;
  const grpc::Status s = stub_->AnalyzeModel(&context, request, &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<v1::ForwardResponse> AttentionClient::ForwardRaw(
    const v1::ForwardRequest& request, std::optional<std::chrono::milliseconds> timeout,
    std::string* request_id) {
  grpc::ClientContext context;
  Prepare(&context, timeout, request_id ? *request_id : "", request.session_id());
  if (options_.protocol == WireProtocol::kOip) {
    auto infer = ToModelInferRequest(request);
    if (!infer.ok()) return infer.status();
    inference::ModelInferResponse answer;
    const grpc::Status s = oip_->ModelInfer(&context, *infer, &answer);
    if (request_id) *request_id = InitialMetadata(context, "x-request-id");
    if (!s.ok()) return codec::FromGrpcStatus(s);
    return FromModelInferResponse(answer);
  }
  v1::ForwardResponse response;
  const grpc::Status s = stub_->Forward(&context, request, &response);
  if (request_id) *request_id = InitialMetadata(context, "x-request-id");
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

void AttentionClient::ForwardAsync(grpc::ClientContext* context, const v1::ForwardRequest* request,
                                   v1::ForwardResponse* response, std::chrono::milliseconds timeout,
                                   std::function<void(grpc::Status)> done) {
  // The context must not be owned by the callback: gRPC destroys the callback after its own
  // last use of the call, which the context keeps alive.
  Prepare(context, timeout, "", request->session_id());
  stub_->async()->Forward(context, request, response, std::move(done));
}

void AttentionClient::GetModelAsync(grpc::ClientContext* context,
                                    const v1::GetModelRequest* request, v1::ModelInfo* response,
                                    std::chrono::milliseconds timeout,
                                    std::function<void(grpc::Status)> done) {
  Prepare(context, timeout);
  stub_->async()->GetModel(context, request, response, std::move(done));
}

Status AttentionClient::ForwardStreamRaw(const std::vector<v1::ForwardRequest>& requests,
                                         std::vector<v1::ForwardResponse>* responses,
                                         std::optional<std::chrono::milliseconds> timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout);
  auto stream = stub_->ForwardStream(&context);
  // Writes on their own thread: the server answers while we still send (flow control).
  std::thread writer([&] {
    for (const auto& request : requests) {
      if (!stream->Write(request)) break;  // the stream ended (error or cancel)
    }
    stream->WritesDone();
  });
  v1::ForwardResponse response;
  while (stream->Read(&response)) responses->push_back(response);
  writer.join();
  return codec::FromGrpcStatus(stream->Finish());
}

std::unique_ptr<AttentionClient::ForwardStreamRW> AttentionClient::OpenForwardStream(
    grpc::ClientContext* context, std::optional<std::chrono::milliseconds> timeout,
    const std::string& session_id) {
  Prepare(context, timeout, "", session_id);
  return stub_->ForwardStream(context);
}

std::unique_ptr<AttentionClient::LayerStepsRW> AttentionClient::OpenLayerSteps(
    grpc::ClientContext* context, std::optional<std::chrono::milliseconds> timeout) {
  Prepare(context, timeout);
  return stub_->LayerSteps(context);
}

StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> AttentionClient::CheckHealth(
    const std::string& service) {
  grpc::ClientContext context;
  Prepare(&context, std::nullopt);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = health_->Check(&context, request, &response);
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response.status();
}

}  // namespace mha::client
