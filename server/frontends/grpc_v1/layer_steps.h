// LayerSteps (mha.v1, docs/afd_stream.md): the ordered stream reactor (common/ordered_stream.h) on
// the per-layer step messages of multi-layer models. Messages are decoded one at a time and each
// is submitted (ServerCore::StepLayer) before the next is read, so a session's steps reach the core
// in stream order; up to `stream_window` messages of one stream are in the core at once; answers
// are written strictly in message order, each echoing its message's id and layer.
//
// A failed message does not end the stream (kErrorsEndStream = false, as the Open Inference
// Protocol's ModelStreamInfer): it is answered in its place with LayerStepResponse.error (code and
// message) and the stream goes on. A step changes server state (the sessions' caches), so ending
// the stream would drop the answers of messages already submitted behind the failing one (their
// caches advanced, their outputs lost); answering each message keeps the FFN side in step with
// the caches. The core counts every message it saw; one that does not decode is counted here.
#pragma once

#include <memory>
#include <string>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/common/ordered_stream.h"
#include "server/frontends/cq/cq_stream.h"
#include "server/frontends/grpc_v1/attention_service.h"
#include "server/serving/layer_step.h"

namespace mha::serve {

struct LayerStepsPolicy {
  using Request = v1::LayerStepRequest;
  using Response = v1::LayerStepResponse;
  using Decoded = LayerStepRequest;
  using Result = LayerStepResponse;
  struct Pending {
    std::shared_ptr<ShmPlan> shm;  // the shared-memory regions its tensors use, until answered
  };
  static constexpr char kMethod[] = "LayerSteps";
  static constexpr Protocol kProtocol = Protocol::kNative;
  static constexpr bool kErrorsEndStream = false;

  InferenceServer* core() const { return service->core(); }
  int window() const { return service->options().stream_window; }
  static const std::string& ModelOf(const Request& request) { return request.model(); }
  StatusOr<LayerStepRequest> Decode(const Request& request, grpc::ServerContextBase* context,
                                    const RequestLog& log, Pending* pending) const;
  static bool InOrder(const LayerStepRequest&) { return true; }
  void Run(LayerStepRequest request, std::function<void(LayerStepResponse)> done) const;
  static Status Encode(const Request& request, const Pending& pending,
                       const LayerStepResponse& result, Response* out);
  static std::unique_ptr<Response> ErrorAnswer(const Request& request, const Status& status);

  AttentionServiceImpl* service;  // not owned
};

using LayerStepsReactor =
    OrderedStreamReactor<LayerStepsPolicy,
                         CqBidiReactor<v1::LayerStepRequest, v1::LayerStepResponse>>;

}  // namespace mha::serve
