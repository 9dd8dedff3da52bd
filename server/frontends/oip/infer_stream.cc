#include "server/frontends/oip/infer_stream.h"

#include <utility>

namespace mha::serve::oip {

std::unique_ptr<inference::ModelStreamInferResponse> StreamError(
    const inference::ModelInferRequest& request, const Status& status) {
  auto response = std::make_unique<inference::ModelStreamInferResponse>();
  response->set_error_message(std::string(StatusCodeName(status.code())) + ": " + status.message());
  response->mutable_infer_response()->set_model_name(request.model_name());
  response->mutable_infer_response()->set_id(request.id());
  return response;
}

StatusOr<InferenceRequest> InferStreamPolicy::Decode(const Request& request,
                                                     grpc::CallbackServerContext* context,
                                                     const RequestLog& log,
                                                     Pending* outputs) const {
  auto decoded = DecodeCall(request, options, *server, context, log);
  if (!decoded.ok()) return decoded.status();
  *outputs = std::move(decoded->outputs);
  return std::move(decoded->request);
}

Status InferStreamPolicy::Encode(const Request& request, const Pending& outputs,
                                 const InferenceResponse& result, Response* out) {
  return EncodeModelInferResponse(result, outputs, request.id(), out->mutable_infer_response());
}

std::unique_ptr<InferStreamPolicy::Response> InferStreamPolicy::ErrorAnswer(const Request& request,
                                                                            const Status& status) {
  return StreamError(request, status);
}

}  // namespace mha::serve::oip
