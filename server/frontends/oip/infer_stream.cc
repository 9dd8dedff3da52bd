#include "server/frontends/oip/infer_stream.h"

#include <utility>

#include "server/frontends/oip/sequence.h"

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
                                                     grpc::ServerContextBase* context,
                                                     const RequestLog& log,
                                                     Pending* pending) const {
  auto decoded = DecodeCall(request, options, *server, context, log);
  if (!decoded.ok()) return decoded.status();
  MHA_RETURN_IF_ERROR(BeginSequence(server, &decoded.value()));  // sequence.h
  pending->outputs = std::move(decoded->outputs);
  pending->sequence = std::move(decoded->sequence);
  pending->session_id = decoded->request.session_id;
  pending->shm = std::move(decoded->shm);
  return std::move(decoded->request);
}

Status InferStreamPolicy::Encode(const Request& request, const Pending& pending,
                                 const InferenceResponse& result, Response* out) const {
  EndSequence(server, pending.sequence, pending.session_id, result.status);
  return EncodeModelInferResponse(result, pending.outputs, request.id(),
                                  out->mutable_infer_response(), &pending.shm);
}

std::unique_ptr<InferStreamPolicy::Response> InferStreamPolicy::ErrorAnswer(const Request& request,
                                                                            const Status& status) {
  return StreamError(request, status);
}

}  // namespace mha::serve::oip
