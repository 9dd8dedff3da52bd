// mha_client: a C++ client for mha.v1.AttentionService (and grpc.health.v1.Health) with no Torch
// in it: requests and responses are the wire messages (tensors as dtype + shape + bytes, see
// proto/wire/tensor_header.h); every call has a deadline; errors come back as mha::Status with the
// server's code and message. The at::Tensor convenience layer is tensor_client.h.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "channel.h"
#include "credentials.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "inference/grpc_service.grpc.pb.h"
#include "mha/status.h"
#include "mha/v1/attention.grpc.pb.h"

namespace mha::client {

// Metadata every session call carries (OpenSession, a step, CloseSession): proxies pin a session to
// one replica by hashing it (docs/scale-out.md); the server checks it against the message's id.
inline constexpr char kSessionIdHeader[] = "x-session-id";

// Which API Forward calls go through: mha.v1.AttentionService/Forward, or the Open Inference
// Protocol's inference.GRPCInferenceService/ModelInfer (same server port; oip_translate.h).
enum class WireProtocol { kNative, kOip };

struct ClientOptions {
  std::string target = "localhost:8500";     // or several: see channel.h
  std::chrono::milliseconds timeout{30000};  // per call (a whole stream for ForwardStream)
  ChannelOptions channel{};                  // load balancing, health checking, retries
  TlsClientOptions tls{};                    // plaintext unless set (client/credentials.h)
  // Sent as "authorization: Bearer <token>" on the model control calls (the server's
  // --admin-token-file); "" = none. Never sent on inference calls.
  std::string admin_token{};
  // ForwardRaw and the load generator; every other call is mha.v1 (or grpc.health.v1).
  WireProtocol protocol = WireProtocol::kNative;
};

class AttentionClient {
 public:
  // Throws std::invalid_argument when options.tls names a file that cannot be read (check first
  // with MakeChannelCredentials for a Status instead).
  explicit AttentionClient(ClientOptions options);
  virtual ~AttentionClient() = default;

  StatusOr<v1::ListModelsResponse> ListModels();
  StatusOr<v1::ModelInfo> GetModel(const std::string& name);
  // name "" = every model, version "" = every version.
  StatusOr<v1::ModelStatisticsResponse> GetModelStatistics(const std::string& name = "",
                                                           const std::string& version = "");
  // The head analysis (docs/heads.md, "Model analysis") of one version ("" = the default model /
  // newest READY version).
  StatusOr<v1::ModelAnalysis> AnalyzeModel(const std::string& name = "",
                                           const std::string& version = "");

  // The raw call, for callers that build requests themselves. `request_id` receives the echo.
  // With options.protocol kOip it goes through ModelInfer and is translated back.
  StatusOr<v1::ForwardResponse> ForwardRaw(const v1::ForwardRequest& request,
                                           std::optional<std::chrono::milliseconds> timeout = {},
                                           std::string* request_id = nullptr);

  // Non-blocking: `done` runs on a gRPC thread with the status and the filled `response`.
  // The caller owns `context` (fresh for each call; deadline set here), `request` and `response`,
  // keeps them alive until `done` has run, and destroys the context only after that.
  void ForwardAsync(grpc::ClientContext* context, const v1::ForwardRequest* request,
                    v1::ForwardResponse* response, std::chrono::milliseconds timeout,
                    std::function<void(grpc::Status)> done);

  void GetModelAsync(grpc::ClientContext* context, const v1::GetModelRequest* request,
                     v1::ModelInfo* response, std::chrono::milliseconds timeout,
                     std::function<void(grpc::Status)> done);

  // Sends every request on one stream (a writer thread) and collects the answers in order. On
  // failure `responses` holds the answers received before the stream ended.
  Status ForwardStreamRaw(const std::vector<v1::ForwardRequest>& requests,
                          std::vector<v1::ForwardResponse>* responses,
                          std::optional<std::chrono::milliseconds> timeout = {});

  // One ForwardStream driven message by message (Write a request, Read its answer, ...), as a
  // decoder steps a session on one stream. The caller owns `context` (fresh; the deadline set here
  // covers the whole stream), keeps it alive past the stream, and ends with WritesDone + Finish.
  using ForwardStreamRW = grpc::ClientReaderWriter<v1::ForwardRequest, v1::ForwardResponse>;
  // `session_id`: a stream of one decoding session's steps carries it as x-session-id.
  std::unique_ptr<ForwardStreamRW> OpenForwardStream(
      grpc::ClientContext* context, std::optional<std::chrono::milliseconds> timeout = {},
      const std::string& session_id = "");

  // Decoding sessions (docs/sessions.md): OpenSession pins a model version and returns the
  // session_id; each step is a Forward with ForwardRequest.session_id and only the new tokens in
  // query; CloseSession gives the server's KV cache blocks back.
  StatusOr<v1::OpenSessionResponse> OpenSession(
      const v1::OpenSessionRequest& request, std::optional<std::chrono::milliseconds> timeout = {});
  StatusOr<v1::CloseSessionResponse> CloseSession(const std::string& session_id);
  // A new session holding the first `tokens` tokens of `session_id` (0 = all; its KV blocks shared
  // until written), and a session's rewind to its first `tokens` tokens. Both carry the source's
  // x-session-id: the fork lives on the source's replica.
  StatusOr<v1::ForkSessionResponse> ForkSession(const std::string& session_id, int64_t tokens = 0,
                                                const std::string& new_session_id = "");
  StatusOr<v1::TruncateSessionResponse> TruncateSession(const std::string& session_id,
                                                        int64_t tokens);

  // The per-layer step stream of Llama models (docs/afd.md, "The step stream"): Write a message per
  // layer of a batch of sessions, Read its answer (in message order; a failed message's answer
  // carries `error`). The caller owns `context` (fresh; the deadline set here covers the whole
  // stream).
  using LayerStepsRW = grpc::ClientReaderWriter<v1::LayerStepRequest, v1::LayerStepResponse>;
  std::unique_ptr<LayerStepsRW> OpenLayerSteps(
      grpc::ClientContext* context, std::optional<std::chrono::milliseconds> timeout = {});

  // mha.v1.ModelControlService (answer when done; a load may take long: pass a timeout).
  Status LoadModel(const std::string& name, std::optional<std::chrono::milliseconds> timeout = {});
  Status UnloadModel(const std::string& name,
                     std::optional<std::chrono::milliseconds> timeout = {});
  StatusOr<v1::RepositoryIndexResponse> RepositoryIndex();

  // grpc.health.v1.Health/Check: SERVING, NOT_SERVING, ... ("" = the whole server).
  StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> CheckHealth(
      const std::string& service = "");

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const ClientOptions& options() const { return options_; }

 private:
  void Prepare(grpc::ClientContext* context, std::optional<std::chrono::milliseconds> timeout,
               const std::string& request_id = "", const std::string& session_id = "") const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  void PrepareAdmin(grpc::ClientContext* context,
                    std::optional<std::chrono::milliseconds> timeout) const;

  std::unique_ptr<v1::AttentionService::Stub> stub_;
  std::unique_ptr<v1::ModelControlService::Stub> control_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
};

}  // namespace mha::client
