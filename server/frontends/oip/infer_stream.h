// ModelStreamInfer (Triton's streaming extension): the ordered stream reactor
// (common/ordered_stream.h) on Open Inference Protocol messages, pipelined like mha.v1
// ForwardStream: up to `stream_window` requests of one stream are in the core at once and the
// answers are written strictly in request order. A request that fails does not end the stream:
// its answer carries error_message ("CODE: message", the same message as ModelInfer) and
// infer_response.id/model_name; the stream ends OK when the client half-closes and every answer
// is written, CANCELLED when a write fails or the call is cancelled. Every request is counted
// once, by ServerCore or (not decoded) by the reactor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "server/frontends/common/ordered_stream.h"
#include "server/frontends/cq/cq_stream.h"
#include "server/frontends/oip/inference_service.h"

namespace mha::serve::oip {

struct InferStreamPolicy {
  using Request = inference::ModelInferRequest;
  using Response = inference::ModelStreamInferResponse;
  // What the answer needs: its outputs, and the sequence step to end (sequence.h).
  struct Pending {
    std::vector<OutputTensor> outputs;
    SequenceControl sequence;
    std::string session_id;  // "" = not a session step
    ShmPlan shm;             // shared-memory regions held until answered (infer_shm.h)
  };
  static constexpr char kMethod[] = "ModelStreamInfer";
  static constexpr Protocol kProtocol = Protocol::kOip;
  static constexpr bool kErrorsEndStream = false;

  InferenceServer* core() const { return server; }
  int window() const { return options.stream_window; }
  static const std::string& ModelOf(const Request& request) { return request.model_name(); }
  StatusOr<InferenceRequest> Decode(const Request& request, grpc::ServerContextBase* context,
                                    const RequestLog& log, Pending* outputs) const;
  // Ends the request's sequence step (EndSequence), then encodes its answer.
  Status Encode(const Request& request, const Pending& pending, const InferenceResponse& result,
                Response* out) const;
  static std::unique_ptr<Response> ErrorAnswer(const Request& request, const Status& status);

  InferenceServer* server;  // not owned; outlives the stream
  OipFrontendOptions options;
};

using InferStreamReactor =
    OrderedStreamReactor<InferStreamPolicy, CqBidiReactor<inference::ModelInferRequest,
                                                          inference::ModelStreamInferResponse>>;

// The stream answer for a request that failed: error_message "CODE: message", the request's id
// and model name.
std::unique_ptr<inference::ModelStreamInferResponse> StreamError(
    const inference::ModelInferRequest& request, const Status& status);

}  // namespace mha::serve::oip
