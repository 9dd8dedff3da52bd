// ForwardStream: the ordered stream reactor (common/ordered_stream.h) on mha.v1 messages. Up to
// `stream_window` requests are in the core at once, answers are written strictly in request
// order, and the first failing request (index N) ends the stream once the answers before it are
// written: status = its code, message "message N: ...".
#pragma once

#include <memory>
#include <string>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/common/ordered_stream.h"
#include "server/frontends/cq/cq_stream.h"
#include "server/frontends/grpc_v1/attention_service.h"

namespace mha::serve {

struct ForwardStreamPolicy {
  using Request = v1::ForwardRequest;
  using Response = v1::ForwardResponse;
  struct Pending {
    bool need_weights = false;
    std::shared_ptr<ShmPlan> shm;  // the shared-memory regions its tensors use, until answered
  };
  static constexpr char kMethod[] = "ForwardStream";
  static constexpr Protocol kProtocol = Protocol::kNative;
  static constexpr bool kErrorsEndStream = true;

  InferenceServer* core() const { return service->core(); }
  int window() const { return service->options().stream_window; }
  static const std::string& ModelOf(const Request& request) { return request.model(); }
  StatusOr<InferenceRequest> Decode(const Request& request, grpc::ServerContextBase* context,
                                    const RequestLog& log, Pending* pending) const;
  static Status Encode(const Request& request, const Pending& pending,
                       const InferenceResponse& result, Response* out);

  AttentionServiceImpl* service;  // not owned
};

using ForwardStreamReactor =
    OrderedStreamReactor<ForwardStreamPolicy,
                         CqBidiReactor<v1::ForwardRequest, v1::ForwardResponse>>;

}  // namespace mha::serve
