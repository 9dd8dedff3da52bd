// ModelStreamInfer (Triton's streaming extension) as a bidi reactor: one request at a time in
// arrival order (read -> ServerCore::Infer -> write -> read the next), so answers come back in
// request order and at most one gRPC operation is outstanding at any time. A request that fails
// does not end the stream: its answer carries error_message ("CODE: message", the same message as
// ModelInfer) and infer_response.id; the stream ends OK when the client half-closes, CANCELLED
// when a write fails. Every request is counted once, by ServerCore or by RecordOutcome here.
// Not pipelined yet: a stream gets one forward pass at a time (the batcher still merges streams).
#pragma once

#include "frontends/grpc_v1/request_log.h"
#include "frontends/oip/inference_service.h"
#include "inference/grpc_service.grpc.pb.h"

namespace mha::serve::oip {

class InferStreamReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  // `core` must outlive the stream; `options` is copied.
  InferStreamReactor(InferenceServer* core, const OipFrontendOptions& options,
                     grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  void Answer(InferenceResponse result, const std::vector<OutputTensor>& outputs);
  void AnswerError(const Status& status);
  void FinishStream(const Status& status);

  InferenceServer* const core_;
  const OipFrontendOptions options_;
  grpc::CallbackServerContext* const context_;
  const RequestLog log_;
  // Owned by the one request in progress: the decoded tensors borrow request_'s bytes, and the
  // next read starts only after its answer is written.
  inference::ModelInferRequest request_;
  inference::ModelStreamInferResponse response_;
  int64_t index_ = 0;  // of the request in progress
  int64_t answered_ = 0;
};

}  // namespace mha::serve::oip
