#include "server/frontends/grpc_v1/forward_stream.h"

namespace mha::serve {

StatusOr<InferenceRequest> ForwardStreamPolicy::Decode(const Request& request,
                                                       grpc::ServerContextBase* context,
                                                       const RequestLog& log,
                                                       Pending* pending) const {
  // The stream keeps each message until its answer: the tensors may borrow its bytes.
  auto plan = std::make_shared<ShmPlan>();
  auto decoded = DecodeCall(request, service->options(), /*borrow=*/true, context, log, plan.get());
  if (decoded.ok()) {
    pending->need_weights = decoded->inputs.need_weights;
    if (!plan->empty()) pending->shm = std::move(plan);
  }
  return decoded;
}

Status ForwardStreamPolicy::Encode(const Request& /*request*/, const Pending& pending,
                                   const InferenceResponse& result, Response* out) {
  return EncodeForwardResponse(result, pending.need_weights, out, nullptr, pending.shm.get());
}

}  // namespace mha::serve
