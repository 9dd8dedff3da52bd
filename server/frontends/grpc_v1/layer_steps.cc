#include "server/frontends/grpc_v1/layer_steps.h"

#include <utility>

#include "server/frontends/grpc_v1/layer_step_wire.h"

namespace mha::serve {

StatusOr<LayerStepRequest> LayerStepsPolicy::Decode(const Request& request,
                                                    grpc::ServerContextBase* context,
                                                    const RequestLog& log, Pending* pending) const {
  // The stream keeps each message until its answer: the tensors may borrow its bytes.
  auto plan = std::make_shared<ShmPlan>();
  auto decoded = DecodeLayerStepRequest(request, service->options().max_message_bytes,
                                        /*borrow=*/true, service->options().shm, plan.get());
  if (!decoded.ok()) return decoded.status();
  if (!plan->empty()) pending->shm = std::move(plan);
  decoded->start = log.start;
  decoded->deadline = SteadyDeadline(context);
  decoded->is_cancelled = [context] { return context->IsCancelled(); };
  decoded->request_id = log.request_id;
  decoded->protocol = kProtocol;
  return decoded;
}

void LayerStepsPolicy::Run(LayerStepRequest request,
                           std::function<void(LayerStepResponse)> done) const {
  core()->StepLayer(std::move(request), std::move(done));
}

Status LayerStepsPolicy::Encode(const Request& request, const Pending& pending,
                                const LayerStepResponse& result, Response* out) {
  return EncodeLayerStepResponse(request, result, out, pending.shm.get());
}

std::unique_ptr<LayerStepsPolicy::Response> LayerStepsPolicy::ErrorAnswer(const Request& request,
                                                                          const Status& status) {
  auto response = std::make_unique<Response>();
  EncodeLayerStepError(request, status, response.get());
  return response;
}

CqBidiBase* AttentionServiceImpl::HandleLayerSteps(std::unique_ptr<CqStreamCall> call) {
  grpc::ServerContextBase* context = call->context();
  return new LayerStepsReactor(LayerStepsPolicy{this}, context, std::move(call));
}

}  // namespace mha::serve
