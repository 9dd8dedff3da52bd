#include "mha_client.h"

#include <grpcpp/security/credentials.h>

#include <thread>

#include "status_convert.h"
#include "tensor_codec.h"

namespace mha::client {
namespace {

Status Encode(const at::Tensor& t, const char* field, v1::Tensor* out) {
  if (!t.defined()) return Status::Ok();
  const Status s = codec::EncodeTensor(t, v1::DATA_TYPE_UNSPECIFIED, out);
  if (!s.ok()) return InvalidArgument(std::string(field) + ": " + s.message());
  return s;
}

std::string InitialMetadata(const grpc::ClientContext& context, const char* key) {
  const auto& metadata = context.GetServerInitialMetadata();
  auto it = metadata.find(key);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.length());
}

}  // namespace

StatusOr<v1::ForwardRequest> MakeForwardRequest(const ForwardInputs& in,
                                                const ForwardOptions& options) {
  v1::ForwardRequest r;
  r.set_model(options.model);
  MHA_RETURN_IF_ERROR(Encode(in.query, "query", r.mutable_query()));
  if (in.key.defined()) MHA_RETURN_IF_ERROR(Encode(in.key, "key", r.mutable_key()));
  if (in.value.defined()) MHA_RETURN_IF_ERROR(Encode(in.value, "value", r.mutable_value()));
  if (in.key_padding_mask.defined()) {
    MHA_RETURN_IF_ERROR(
        Encode(in.key_padding_mask, "key_padding_mask", r.mutable_key_padding_mask()));
  }
  if (in.attn_mask.defined()) {
    MHA_RETURN_IF_ERROR(Encode(in.attn_mask, "attn_mask", r.mutable_attn_mask()));
  }
  r.set_is_causal(in.is_causal);
  r.set_need_weights(in.need_weights);
  r.set_average_attn_weights(options.average_attn_weights.value_or(in.average_attn_weights));
  r.set_output_dtype(options.output_dtype);
  return r;
}

StatusOr<ForwardResult> ParseForwardResponse(const v1::ForwardResponse& response) {
  ForwardResult result;
  if (!response.has_output()) return Internal("response without output");
  auto output = codec::DecodeTensor(response.output(), "output");
  if (!output.ok()) return Internal(output.status().message());
  result.output = std::move(output.value());
  if (response.has_attn_weights()) {
    auto weights = codec::DecodeTensor(response.attn_weights(), "attn_weights");
    if (!weights.ok()) return Internal(weights.status().message());
    result.attn_weights = std::move(weights.value());
  }
  result.model = response.model();
  result.model_version = response.model_version();
  result.queue_us = response.queue_us();
  result.compute_us = response.compute_us();
  return result;
}

AttentionClient::AttentionClient(ClientOptions options) : options_(std::move(options)) {
  // Message sizes unlimited by default (per-head weights get big; the server decides with
  // --max-message-bytes); load balancing, health checking and retries: channel.h.
  channel_ = MakeClientChannel(options_.target, options_.channel);
  stub_ = v1::AttentionService::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

void AttentionClient::Prepare(grpc::ClientContext* context,
                              std::optional<std::chrono::milliseconds> timeout,
                              const std::string& request_id) const {
  context->set_deadline(std::chrono::system_clock::now() + timeout.value_or(options_.timeout));
  if (!request_id.empty()) context->AddMetadata("x-request-id", request_id);
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

StatusOr<v1::ForwardResponse> AttentionClient::ForwardRaw(
    const v1::ForwardRequest& request, std::optional<std::chrono::milliseconds> timeout,
    std::string* request_id) {
  grpc::ClientContext context;
  Prepare(&context, timeout, request_id ? *request_id : "");
  v1::ForwardResponse response;
  const grpc::Status s = stub_->Forward(&context, request, &response);
  if (request_id) *request_id = InitialMetadata(context, "x-request-id");
  if (!s.ok()) return codec::FromGrpcStatus(s);
  return response;
}

StatusOr<ForwardResult> AttentionClient::Forward(const ForwardInputs& inputs,
                                                 const ForwardOptions& options) {
  auto request = MakeForwardRequest(inputs, options);
  if (!request.ok()) return request.status();
  std::string request_id = options.request_id;
  auto response = ForwardRaw(*request, options.timeout, &request_id);
  if (!response.ok()) return response.status();
  auto result = ParseForwardResponse(*response);
  if (result.ok()) result->request_id = request_id;
  return result;
}

void AttentionClient::ForwardAsync(grpc::ClientContext* context, const v1::ForwardRequest* request,
                                   v1::ForwardResponse* response, std::chrono::milliseconds timeout,
                                   std::function<void(grpc::Status)> done) {
  // The context must not be owned by the callback: gRPC destroys the callback after its own
  // last use of the call, which the context keeps alive.
  Prepare(context, timeout);
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

StatusOr<std::vector<ForwardResult>> AttentionClient::ForwardStream(
    const std::vector<ForwardInputs>& inputs, const ForwardOptions& options) {
  std::vector<v1::ForwardRequest> requests;
  requests.reserve(inputs.size());
  for (const auto& in : inputs) {
    auto request = MakeForwardRequest(in, options);
    if (!request.ok()) return request.status();
    requests.push_back(std::move(request.value()));
  }
  std::vector<v1::ForwardResponse> responses;
  MHA_RETURN_IF_ERROR(ForwardStreamRaw(requests, &responses, options.timeout));
  std::vector<ForwardResult> results;
  for (const auto& response : responses) {
    auto result = ParseForwardResponse(response);
    if (!result.ok()) return result.status();
    results.push_back(std::move(result.value()));
  }
  return results;
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
