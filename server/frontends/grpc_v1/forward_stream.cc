#include "server/frontends/grpc_v1/forward_stream.h"

namespace mha::serve {

StatusOr<InferenceRequest> ForwardStreamPolicy::Decode(const Request& request,
                                                       grpc::CallbackServerContext* context,
                                                       const RequestLog& log,
                                                       Pending* need_weights) const {
  // The stream keeps each message until its answer: the tensors may borrow its bytes.
  auto decoded = DecodeCall(request, service->options(), /*borrow=*/true, context, log);
  if (decoded.ok()) *need_weights = decoded->inputs.need_weights;
  return decoded;
}

Status ForwardStreamPolicy::Encode(const Request& /*request*/, const Pending& need_weights,
                                   const InferenceResponse& result, Response* out) {
  return EncodeForwardResponse(result, need_weights, out);
}

}  // namespace mha::serve
