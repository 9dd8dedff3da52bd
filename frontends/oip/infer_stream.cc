#include "frontends/oip/infer_stream.h"

#include <string>
#include <utility>

#include "wire/status_convert.h"

namespace mha::serve::oip {

InferStreamReactor::InferStreamReactor(InferenceServer* core, const OipFrontendOptions& options,
                                       grpc::CallbackServerContext* context)
    : core_(core),
      options_(options),
      context_(context),
      log_(StartRequest(context, "ModelStreamInfer")) {
  StartRead(&request_);
}

void InferStreamReactor::OnReadDone(bool ok) {
  if (!ok) {  // the client half-closed (or the call ended): nothing is outstanding
    FinishStream(context_->IsCancelled() ? Cancelled("stream cancelled") : Status::Ok());
    return;
  }
  RequestLog message_log = log_;
  message_log.start = Clock::now();
  message_log.request_id += "#" + std::to_string(index_);
  auto decoded = DecodeCall(request_, options_, *core_, context_, message_log);
  if (!decoded.ok()) {
    core_->RecordOutcome(request_.model_name(), decoded.status(), message_log.start);
    AnswerError(decoded.status());
    return;
  }
  InferCall& call = decoded.value();
  // `done` may run inline (refused) or on a scheduler worker; either way it starts the write.
  core_->Infer(std::move(call.request),
               [this, outputs = std::move(call.outputs)](InferenceResponse result) {
                 Answer(std::move(result), outputs);
               });
}

void InferStreamReactor::Answer(InferenceResponse result,
                                const std::vector<OutputTensor>& outputs) {
  response_.Clear();
  const Status status = EncodeModelInferResponse(result, outputs, request_.id(),
                                                 response_.mutable_infer_response());
  if (!status.ok()) {
    AnswerError(status);
    return;
  }
  StartWrite(&response_);
}

void InferStreamReactor::AnswerError(const Status& status) {
  response_.Clear();
  response_.set_error_message(std::string(StatusCodeName(status.code())) + ": " +
                              status.message());
  response_.mutable_infer_response()->set_model_name(request_.model_name());
  response_.mutable_infer_response()->set_id(request_.id());
  StartWrite(&response_);
}

void InferStreamReactor::OnWriteDone(bool ok) {
  if (!ok) {  // the client went away; no read is outstanding
    FinishStream(Cancelled("stream ended after " + std::to_string(answered_) + " answers"));
    return;
  }
  ++answered_;
  ++index_;
  request_.Clear();
  StartRead(&request_);
}

void InferStreamReactor::FinishStream(const Status& status) {
  LogOutcome(log_, status, "answers=" + std::to_string(answered_));
  Finish(codec::ToGrpcStatus(status));
}

}  // namespace mha::serve::oip
